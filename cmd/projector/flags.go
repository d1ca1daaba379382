package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/projector/projector/internal/config"
	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/shutdown"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
)

// newFlagSet returns a flag set whose usage lists the environment variables.
func newFlagSet(name, synopsis string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	if e.onFlagSet != nil {
		e.onFlagSet(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: projector %s\n\nflags, each with the environment variable it also reads (the flag wins):\n", synopsis)
		printDefaults(e.stderr, fs)
	}
	return fs
}

// printDefaults prints what fs.PrintDefaults does, each flag followed by
// the variable it reads: PROJECTOR_<FLAG>, or for a flag whose name another
// command has with another meaning, PROJECTOR_<COMMAND>_<FLAG> (issue 28:
// help said every flag reads PROJECTOR_<FLAG>, and some did not).
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, line := range lines {
		fmt.Fprintln(w, line)
		last := i+1 == len(lines) || strings.HasPrefix(lines[i+1], "  -")
		if !last {
			continue
		}
		// The flag whose block this line ends.
		for j := i; j >= 0; j-- {
			if name, ok := strings.CutPrefix(lines[j], "  -"); ok {
				name, _, _ = strings.Cut(name, " ")
				fmt.Fprintf(w, "    \t(env %s)\n", variableOf(fs.Name(), name))
				break
			}
		}
	}
}

// parse reads args and the environment into fs, then the secrets the
// flags name (see secretFile). A flag or variable that does not parse is a
// usage error; a secret file that cannot be read is not.
func parse(fs *flag.FlagSet, args []string, e env) error {
	if err := parseWithArgs(fs, args, e); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(unexpectedArgument(fs))
	}
	return nil
}

// parseWithArgs is parse for the commands that take positional arguments
// (resume); they check what the arguments are themselves.
func parseWithArgs(fs *flag.FlagSet, args []string, e env) error {
	if err := config.Parse(fs, args, e.getenv, func(name string) string { return variableOf(fs.Name(), name) }); err != nil {
		return usageError(err)
	}
	if err := foreignVariables(fs.Name(), e.getenv); err != nil {
		return usageError(err)
	}
	return resolveSecrets(fs, e.getenv)
}

// unexpectedArgument says why an argument a command takes none of is
// refused, before the command touches anything: Go's flag parsing stops at
// the first argument, so every flag after it would be ignored without a
// word (replay --to earliest 0 --partitions 0 would reset every partition).
func unexpectedArgument(fs *flag.FlagSet) error {
	return fmt.Errorf("unexpected argument %q: this command takes flags only, and a flag after an argument is not read (projector %s -h)", fs.Arg(0), fs.Name())
}

// renamedFlag stands for a flag that has a new name: setting it, on the
// command line or through its environment variable, is a usage error that
// names the new one, rather than an unknown flag or, for the variable, a
// setting silently lost.
type renamedFlag struct{ now, why string }

func (renamedFlag) String() string { return "" }

func (r renamedFlag) Set(string) error {
	return fmt.Errorf("renamed %s: %s", r.now, r.why)
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
		return nil, usageError(fmt.Errorf("--log-level: %w", err))
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
		return nil, usageError(fmt.Errorf("--log-format %q: want json or console", l.format))
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(e.stderr)), level)), nil
}

// kafkaLogLevel is the level of the Kafka client's own logs for log's
// level, so that --log-level debug reaches them. At info the client stays
// at warn: its info lines are its group and metadata bookkeeping, some
// twenty at every start and rebalance, which the consumer's own info lines
// (partition assigned, revoked) already say in the projector's terms.
func kafkaLogLevel(log *zap.Logger) kgo.LogLevel {
	switch core := log.Core(); {
	case core.Enabled(zapcore.DebugLevel):
		return kgo.LogLevelDebug
	case core.Enabled(zapcore.WarnLevel):
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelError
}

// kafkaSASLPasswordEnv holds the Kafka SASL password when no file does.
const kafkaSASLPasswordEnv = "PROJECTOR_KAFKA_SASL_PASSWORD"

// kafkaFlags say how to reach Kafka, and how to authenticate and encrypt:
// every Kafka client of every command gets the same options from opts.
type kafkaFlags struct {
	brokers       string
	tls           bool
	tlsCAFile     string
	tlsCertFile   string
	tlsKeyFile    string
	saslMechanism string
	saslUser      string
	saslPassword  secretFile
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port")
	fs.BoolVar(&k.tls, "kafka-tls", false, "connect to the brokers over TLS (implied by --kafka-tls-ca-file and --kafka-tls-cert-file)")
	fs.StringVar(&k.tlsCAFile, "kafka-tls-ca-file", "", "PEM file of the CA certificates to trust for the brokers instead of the system's (a private CA)")
	fs.StringVar(&k.tlsCertFile, "kafka-tls-cert-file", "", "PEM client certificate, for brokers that require one (mutual TLS); needs --kafka-tls-key-file")
	fs.StringVar(&k.tlsKeyFile, "kafka-tls-key-file", "", "PEM private key of --kafka-tls-cert-file")
	fs.StringVar(&k.saslMechanism, "kafka-sasl-mechanism", "", "SASL authentication: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none); use it with TLS, PLAIN sends the password as it is")
	fs.StringVar(&k.saslUser, "kafka-sasl-user", "", "SASL user name")
	k.saslPassword.envVar = kafkaSASLPasswordEnv
	fs.Var(&k.saslPassword, "kafka-sasl-password-file", "file holding the SASL password (or set "+kafkaSASLPasswordEnv+"; there is no flag for the password itself)")
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
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.WithLogger(kzap.New(log.With(zap.String("component", "kafka")), kzap.Level(kafkaLogLevel(log)))),
	}
	encrypted := k.tls || k.tlsCAFile != "" || k.tlsCertFile != "" || k.tlsKeyFile != ""
	if encrypted {
		cfg, err := clientTLS("--kafka-tls", k.tlsCAFile, k.tlsCertFile, k.tlsKeyFile)
		if err != nil {
			return nil, err
		}
		// franz-go sets each broker's host name as ServerName when dialing.
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	mech, err := k.sasl()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
		if !encrypted {
			log.Warn("Kafka SASL without TLS: the broker connection is not encrypted and anyone on the path can read the records; PLAIN also sends the password as it is; set --kafka-tls",
				zap.String("mechanism", mech.Name()))
		}
	}
	return opts, nil
}

// sasl returns the SASL mechanism of the flags, or nil for none.
func (k *kafkaFlags) sasl() (sasl.Mechanism, error) {
	mechanism := strings.ToUpper(strings.TrimSpace(k.saslMechanism))
	password := k.saslPassword.secret
	if mechanism == "" {
		if k.saslUser != "" || password != "" {
			return nil, errors.New("a Kafka SASL user or password is set but --kafka-sasl-mechanism is not: set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return nil, nil
	}
	if k.saslUser == "" {
		return nil, fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-sasl-user", mechanism)
	}
	if password == "" {
		return nil, fmt.Errorf("--kafka-sasl-mechanism %s needs a password: set %s or --kafka-sasl-password-file", mechanism, kafkaSASLPasswordEnv)
	}
	switch mechanism {
	case "PLAIN":
		return plain.Auth{User: k.saslUser, Pass: password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: k.saslUser, Pass: password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: k.saslUser, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("--kafka-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.saslMechanism)
}

// qdrantAPIKeyEnv holds the Qdrant API key when no file does.
const qdrantAPIKeyEnv = "PROJECTOR_QDRANT_API_KEY"

// storeFlags say how to reach the three stores, and how to authenticate
// and encrypt.
type storeFlags struct {
	qdrantAddr        string
	qdrantCollection  string
	qdrantUpsertBatch int
	qdrantUpsertBytes int
	qdrantUpserts     int
	qdrantShards      int
	qdrantAPIKey      secretFile
	qdrantTLS         bool
	qdrantTLSCAFile   string
	vectorDim         int
	neo4jURI          string
	neo4jUser         string
	neo4jPassword     string
	neo4jPasswordFlag commandLineSecret // stores into neo4jPassword
	neo4jPasswordFile secretFile
	neo4jTLSCAFile    string
	neo4jDatabase     string
	graphChunkText    bool
	postgresDSN       string
	postgresDSNFlag   commandLineSecret // stores into postgresDSN
	postgresSchema    string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.qdrantAddr, "qdrant-addr", "127.0.0.1:6334", "Qdrant gRPC address, host:port")
	fs.StringVar(&s.qdrantCollection, "qdrant-collection", "chunks", "Qdrant collection alias that readers search; the projector writes each index generation's collection, <alias>_g<N> (docs/operations.md, \"Index generations\")")
	fs.IntVar(&s.qdrantUpsertBatch, "qdrant-upsert-batch", 256, "points per Qdrant upsert call")
	fs.IntVar(&s.qdrantUpsertBytes, "qdrant-upsert-max-bytes", index.DefaultUpsertMaxBytes, "bytes per Qdrant upsert call (a document's title and metadata are in every point's payload); keep it below the server's gRPC message limit; a record with a larger point is dead-lettered (store_rejected)")
	fs.IntVar(&s.qdrantUpserts, "qdrant-upsert-concurrency", 4, "Qdrant upsert calls of one batch in flight at once (per partition); the filtered delete of old points waits for all of them")
	fs.IntVar(&s.qdrantShards, "qdrant-shards", 0, "shards of the Qdrant collection when the projector creates it (0: Qdrant's default, one per node); an existing collection keeps its own")
	s.qdrantAPIKey.envVar = qdrantAPIKeyEnv
	fs.Var(&s.qdrantAPIKey, "qdrant-api-key-file", "file holding the Qdrant API key (or set "+qdrantAPIKeyEnv+"; there is no flag for the key itself); use it with --qdrant-tls")
	fs.BoolVar(&s.qdrantTLS, "qdrant-tls", false, "connect to Qdrant over TLS (implied by --qdrant-tls-ca-file)")
	fs.StringVar(&s.qdrantTLSCAFile, "qdrant-tls-ca-file", "", "PEM file of the CA certificates to trust for Qdrant instead of the system's (a private CA)")
	fs.IntVar(&s.vectorDim, "vector-dim", 384, "dimension of the chunk vectors (the embedder's and the collection's)")
	s.registerGraph(fs)
	fs.BoolVar(&s.graphChunkText, "graph-chunk-text", false, "keep each chunk's text on its Neo4j Chunk node too (it is always in Qdrant and PostgreSQL); off, graph writes are faster (docs/benchmarks.md) and the graph smaller; chunk nodes written before keep their text until rewritten")
	s.registerRelational(fs)
}

// registerGraph registers the flags that reach Neo4j, for the commands
// that use the graph (ledger-prune uses it and PostgreSQL only).
func (s *storeFlags) registerGraph(fs *flag.FlagSet) {
	fs.StringVar(&s.neo4jURI, "neo4j-uri", "bolt://127.0.0.1:7687", "Neo4j Bolt URI (bolt://, bolt+s://, neo4j://, neo4j+s://)")
	fs.StringVar(&s.neo4jUser, "neo4j-user", "neo4j", "Neo4j user")
	s.neo4jPasswordFlag = commandLineSecret{value: &s.neo4jPassword}
	fs.Var(&s.neo4jPasswordFlag, "neo4j-password", "Neo4j password; prefer PROJECTOR_NEO4J_PASSWORD or --neo4j-password-file, a flag value shows in ps (empty: no authentication)")
	fs.Var(&s.neo4jPasswordFile, "neo4j-password-file", "file holding the Neo4j password (instead of --neo4j-password or PROJECTOR_NEO4J_PASSWORD)")
	fs.StringVar(&s.neo4jTLSCAFile, "neo4j-tls-ca-file", "", "PEM file of the CA certificates to trust for neo4j+s:// and bolt+s:// URIs instead of the system's (a private CA)")
	fs.StringVar(&s.neo4jDatabase, "neo4j-database", "", "Neo4j database (empty: the server's default)")
}

// registerRelational registers the PostgreSQL flags, for commands that
// use few stores (ledger-prune), so that their -h lists only what they
// read.
func (s *storeFlags) registerRelational(fs *flag.FlagSet) {
	s.postgresDSN = "postgres://projector:projector@127.0.0.1:5432/projector?sslmode=disable"
	s.postgresDSNFlag = commandLineSecret{value: &s.postgresDSN}
	fs.Var(&s.postgresDSNFlag, "postgres-dsn", "PostgreSQL connection string (URL or key=value; libpq settings such as sslmode=verify-full, sslrootcert, sslcert, sslkey and passfile apply, and PGPASSWORD); keep a password out of a flag value, which shows in ps")
	fs.StringVar(&s.postgresSchema, "postgres-schema", "projector", "PostgreSQL schema of the projector's tables")
}

// stores are the three open store adapters.
type stores struct {
	// index writes the live generation's collection once migrate or
	// useLive found it; before, the collection of --qdrant-collection.
	index      *index.Store
	graph      *graph.Store
	relational *postgres.Store
	// qdrant is the index adapter open returned, whose connection every
	// generation's shares; alias is the collection readers search.
	qdrant *index.Store
	alias  string
	// generations is the registry as migrate or useLive read it.
	generations generation.Set
	// exposed lists the secrets given on the command line, for migrate's
	// warning.
	exposed []exposedSecret
}

// exposedSecret is a secret given as a flag value, and where it should be.
type exposedSecret struct {
	flag, instead string
}

// exposedSecrets lists the secrets given on the command line.
func (s *storeFlags) exposedSecrets() []exposedSecret {
	var out []exposedSecret
	if s.neo4jPasswordFlag.onCommandLine {
		out = append(out, exposedSecret{"--neo4j-password", "PROJECTOR_NEO4J_PASSWORD or --neo4j-password-file"})
	}
	if s.postgresDSNFlag.onCommandLine && dsnHasPassword(s.postgresDSN) {
		out = append(out, exposedSecret{"--postgres-dsn", "PROJECTOR_POSTGRES_DSN, a passfile (passfile=... in the DSN) or PGPASSWORD"})
	}
	return out
}

// open opens the three adapters; they connect lazily.
func (s *storeFlags) open(ctx context.Context) (*stores, error) {
	var qdrantTLS *tls.Config
	if s.qdrantTLS || s.qdrantTLSCAFile != "" {
		cfg, err := clientTLS("--qdrant-tls", s.qdrantTLSCAFile, "", "")
		if err != nil {
			return nil, err
		}
		qdrantTLS = cfg
	}
	idx, err := index.Open(index.Config{
		Addr: s.qdrantAddr, Collection: s.qdrantCollection, Dim: s.vectorDim, UpsertBatch: s.qdrantUpsertBatch, UpsertMaxBytes: s.qdrantUpsertBytes, UpsertConcurrency: s.qdrantUpserts,
		Shards: s.qdrantShards, APIKey: s.qdrantAPIKey.secret, TLS: qdrantTLS,
	})
	if err != nil {
		return nil, err
	}
	gr, err := s.openGraph()
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
	return &stores{index: idx, graph: gr, relational: rel, qdrant: idx, alias: s.qdrantCollection, exposed: s.exposedSecrets()}, nil
}

// openGraph opens the graph adapter of the flags; it connects lazily.
func (s *storeFlags) openGraph() (*graph.Store, error) {
	password := s.neo4jPassword
	if s.neo4jPasswordFile.secret != "" {
		if password != "" {
			return nil, errors.New("the Neo4j password is set twice: give --neo4j-password-file, or --neo4j-password (PROJECTOR_NEO4J_PASSWORD), not both")
		}
		password = s.neo4jPasswordFile.secret
	}
	var neo4jTLS *tls.Config
	if s.neo4jTLSCAFile != "" {
		cfg, err := clientTLS("--neo4j-tls", s.neo4jTLSCAFile, "", "")
		if err != nil {
			return nil, err
		}
		neo4jTLS = cfg
	}
	return graph.Open(s.graphConfig(password, neo4jTLS))
}

// graphConfig is the graph adapter's configuration of the flags, with the
// password and TLS configuration open resolved.
func (s *storeFlags) graphConfig(password string, tlsConfig *tls.Config) graph.Config {
	return graph.Config{URI: s.neo4jURI, User: s.neo4jUser, Password: password, Database: s.neo4jDatabase, TLS: tlsConfig,
		ChunkText: s.graphChunkText}
}

// close closes the three adapters at once, and gives up on those that have
// not closed within shutdown.CloseTimeout: a store whose connections are
// dead (a peer that passes no byte and resets nothing) must not hold the
// process past the 10 s a stop may take. The error names those given up.
func (st *stores) close(ctx context.Context) error {
	return shutdown.CloseAll(ctx, shutdown.CloseTimeout,
		shutdown.Closer{Name: "Qdrant", Close: func(context.Context) error { return st.qdrant.Close() }},
		shutdown.Closer{Name: "Neo4j", Close: st.graph.Close},
		shutdown.Closer{Name: "PostgreSQL", Close: func(context.Context) error {
			st.relational.Close()
			return nil
		}},
	)
}

// migrate creates what each store needs: the relational schema first, as
// it holds the registry of index generations; then, from the registry,
// every generation's collection that run writes and the readers' alias of
// the live one; then the graph's constraints. An empty registry gets
// generation 1 with the embedder emb (generation.Bootstrap). A store that
// does not answer yet is waited for (in a compose file the stores start
// with the projector); a fatal problem such as a dimension mismatch or a
// wrong credential stops, with an error that names the server. It is the
// first thing `projector run` does with the stores, so it also warns about
// secrets given on the command line. Without applySchema the relational
// schema is only checked: it must be at this build's version already.
// Afterwards st.index writes the live generation.
func (st *stores) migrate(ctx context.Context, log *zap.Logger, applySchema bool, emb generation.Embedder) error {
	for _, e := range st.exposed {
		log.Warn("a secret was given on the command line, where ps shows it to every user of the machine; set it through "+e.instead+" instead",
			zap.String("flag", e.flag))
	}
	schema := st.relational.Migrate
	if !applySchema {
		schema = st.relational.CheckSchema
	}
	steps := []struct {
		name   string
		server string
		fn     func(context.Context) error
	}{
		{project.StoreRelational, "PostgreSQL", schema},
		{project.StoreIndex, "Qdrant", func(ctx context.Context) error { return st.migrateGenerations(ctx, log, emb) }},
		{project.StoreGraph, "Neo4j", st.graph.Migrate},
	}
	for _, s := range steps {
		err := waitUntil(ctx, log, "store", s.fn, storeTransient, zap.String("store", s.name), zap.String("server", s.server))
		if err != nil {
			return fmt.Errorf("prepare %s store (%s): %w", s.name, s.server, err)
		}
	}
	return nil
}

// migrateGenerations bootstraps the registry, creates the collection of
// every generation run writes and the alias of the live one, and points
// st.index at the live one.
func (st *stores) migrateGenerations(ctx context.Context, log *zap.Logger, emb generation.Embedder) error {
	set, err := generation.Bootstrap(ctx, st.relational, st.qdrant, st.alias, emb)
	if err != nil {
		return err
	}
	live, ok := set.Live()
	if !ok {
		return errors.New("the generation registry has no live generation")
	}
	for _, g := range set.Written() {
		if err := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim).Migrate(ctx); err != nil {
			return fmt.Errorf("%s: %w", g, err)
		}
	}
	if !live.Legacy(st.alias) {
		if err := st.qdrant.EnsureAlias(ctx, st.alias, live.Collection); err != nil {
			return err
		}
	}
	st.useGenerations(set)
	log.Info("index generations", zap.String("alias", st.alias), zap.Int("live", live.Number), zap.String("collection", live.Collection),
		zap.Int("written", len(set.Written())))
	return nil
}

// openLive opens the three adapters with st.index on the live generation
// (useLive).
func (s *storeFlags) openLive(ctx context.Context) (*stores, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.useLive(ctx); err != nil {
		_ = st.close(context.WithoutCancel(ctx))
		return nil, err
	}
	return st, nil
}

// useLive checks that the relational schema is at this build's version,
// reads the registry and points st.index at the live generation, changing
// nothing: for the commands that read the stores, and act on them
// (reconcile, generation), on which stores nothing was projected to are
// not empty stores. An empty registry leaves st.index on
// --qdrant-collection.
func (st *stores) useLive(ctx context.Context) error {
	if err := st.relational.CheckSchema(ctx); err != nil {
		return fmt.Errorf("the relational store: %w", err)
	}
	set, err := st.relational.Generations(ctx, st.alias)
	if err != nil {
		return fmt.Errorf("the relational store: %w", err)
	}
	st.useGenerations(set)
	return nil
}

func (st *stores) useGenerations(set generation.Set) {
	st.generations = set
	if live, ok := set.Live(); ok {
		st.index = st.qdrant.ForCollection(live.Collection, live.Embedder.Dim)
	}
}
