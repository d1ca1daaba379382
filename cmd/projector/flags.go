package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/projector/projector/internal/config"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
)

// newFlagSet returns a flag set whose usage lists the environment variables.
func newFlagSet(name, synopsis string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: projector %s\n\nflags (each also read from PROJECTOR_<FLAG_NAME>):\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string, e env) error {
	return config.Parse(fs, args, e.getenv)
}

// logFlags configure the logger.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "json", "log format: json (for log collectors) or console (for people)")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(e env) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(l.level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var enc zapcore.Encoder
	switch l.format {
	case "json":
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	case "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout(time.TimeOnly)
		enc = zapcore.NewConsoleEncoder(cfg)
	default:
		return nil, fmt.Errorf("--log-format %q: want json or console", l.format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(e.stderr)), level)), nil
}

// kafkaFlags say how to reach Kafka.
type kafkaFlags struct {
	brokers string
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port")
}

// opts returns the connection options every Kafka client of the service uses.
func (k *kafkaFlags) opts(log *zap.Logger) ([]kgo.Opt, error) {
	var seeds []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("--brokers is empty")
	}
	return []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(kzap.New(log.With(zap.String("component", "kafka")), kzap.Level(kgo.LogLevelWarn))),
	}, nil
}

// storeFlags say how to reach the three stores.
type storeFlags struct {
	qdrantAddr        string
	qdrantCollection  string
	qdrantUpsertBatch int
	vectorDim         int
	neo4jURI          string
	neo4jUser         string
	neo4jPassword     string
	neo4jPasswordFile string
	neo4jDatabase     string
	postgresDSN       string
	postgresSchema    string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.qdrantAddr, "qdrant-addr", "127.0.0.1:6334", "Qdrant gRPC address, host:port")
	fs.StringVar(&s.qdrantCollection, "qdrant-collection", "chunks", "Qdrant collection of the chunks")
	fs.IntVar(&s.qdrantUpsertBatch, "qdrant-upsert-batch", 256, "points per Qdrant upsert call")
	fs.IntVar(&s.vectorDim, "vector-dim", 384, "dimension of the chunk vectors (the embedder's and the collection's)")
	fs.StringVar(&s.neo4jURI, "neo4j-uri", "bolt://127.0.0.1:7687", "Neo4j Bolt URI (bolt://, bolt+s://, neo4j://, neo4j+s://)")
	fs.StringVar(&s.neo4jUser, "neo4j-user", "neo4j", "Neo4j user")
	fs.StringVar(&s.neo4jPassword, "neo4j-password", "", "Neo4j password; prefer PROJECTOR_NEO4J_PASSWORD or --neo4j-password-file, a flag value shows in ps (empty: no authentication)")
	fs.StringVar(&s.neo4jPasswordFile, "neo4j-password-file", "", "file holding the Neo4j password")
	fs.StringVar(&s.neo4jDatabase, "neo4j-database", "", "Neo4j database (empty: the server's default)")
	fs.StringVar(&s.postgresDSN, "postgres-dsn", "postgres://projector:projector@127.0.0.1:5432/projector?sslmode=disable", "PostgreSQL connection string (URL or key=value; libpq settings such as sslmode, sslrootcert and passfile apply)")
	fs.StringVar(&s.postgresSchema, "postgres-schema", "projector", "PostgreSQL schema of the projector's tables")
}

// stores are the three open store adapters.
type stores struct {
	index      *index.Store
	graph      *graph.Store
	relational *postgres.Store
}

// open opens the three adapters; they connect lazily.
func (s *storeFlags) open(ctx context.Context) (*stores, error) {
	password := s.neo4jPassword
	if s.neo4jPasswordFile != "" {
		b, err := os.ReadFile(s.neo4jPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--neo4j-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	idx, err := index.Open(index.Config{
		Addr: s.qdrantAddr, Collection: s.qdrantCollection, Dim: s.vectorDim, UpsertBatch: s.qdrantUpsertBatch,
	})
	if err != nil {
		return nil, err
	}
	gr, err := graph.Open(graph.Config{URI: s.neo4jURI, User: s.neo4jUser, Password: password, Database: s.neo4jDatabase})
	if err != nil {
		_ = idx.Close()
		return nil, err
	}
	rel, err := postgres.Open(ctx, s.postgresDSN, s.postgresSchema)
	if err != nil {
		_ = idx.Close()
		_ = gr.Close(ctx)
		return nil, err
	}
	return &stores{index: idx, graph: gr, relational: rel}, nil
}

func (st *stores) close(ctx context.Context) {
	_ = st.index.Close()
	_ = st.graph.Close(ctx)
	st.relational.Close()
}

// migrate creates what each store needs, in the write order. A store that
// does not answer yet is waited for (in a compose file the stores start
// with the projector); a fatal problem such as a dimension mismatch stops.
func (st *stores) migrate(ctx context.Context, log *zap.Logger) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{project.StoreIndex, st.index.Migrate},
		{project.StoreGraph, st.graph.Migrate},
		{project.StoreRelational, st.relational.Migrate},
	}
	for _, s := range steps {
		delay := 500 * time.Millisecond
		for waited := false; ; {
			err := s.fn(ctx)
			if err == nil {
				break
			}
			if project.KindOf(err) == project.Fatal || ctx.Err() != nil {
				return fmt.Errorf("prepare %s store: %w", s.name, err)
			}
			if !waited {
				log.Warn("store not available yet; waiting", zap.String("store", s.name), zap.Error(err))
				waited = true
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("prepare %s store: %w", s.name, ctx.Err())
			case <-time.After(delay):
			}
			delay = min(2*delay, 10*time.Second)
		}
	}
	return nil
}
