package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"

	"github.com/projector/projector/internal/bench"
	pconfig "github.com/projector/projector/internal/config"
)

// benchFlags are the flags of `projector bench`.
type benchFlags struct {
	log    logFlags
	kafka  kafkaFlags
	stores storeFlags

	documents      int
	partitions     string
	seed           uint64
	runs           int
	skipNaive      bool
	skipCount      bool
	variantArgs    string
	naiveChunks    int
	batchRecords   int
	maxBatchChunks int
	timeout        time.Duration
	indexSettle    time.Duration
	peerClasspath  string
	peerBatchSize  int
	peerLogDir     string
	java           string
	cpuProfile     string
	cpuOf          string
}

// register adds the flags to fs and returns the names of those the
// measured service gets too: the Kafka and store flags.
func (f *benchFlags) register(fs *flag.FlagSet) map[string]bool {
	f.kafka.register(fs)
	f.stores.register(fs)
	forwarded := map[string]bool{}
	fs.VisitAll(func(fl *flag.Flag) { forwarded[fl.Name] = true })
	// Each measurement has a collection and a schema of its own.
	delete(forwarded, "qdrant-collection")
	delete(forwarded, "postgres-schema")
	f.log.register(fs)
	// The batch sizes default to run's.
	var run runFlags
	run.register(flag.NewFlagSet("run", flag.ContinueOnError))
	fs.IntVar(&f.documents, "documents", 3000, "distinct documents of the synthetic corpus; it adds a new version to about 20% of them and withdraws about 5%")
	fs.StringVar(&f.partitions, "partitions", "1,2,4", "partition counts to measure, comma-separated")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the corpus; the same seed gives the same corpus")
	fs.IntVar(&f.runs, "runs", 1, "times to repeat every measurement; the report gives medians")
	fs.BoolVar(&f.skipNaive, "skip-naive", false, "leave out the naive projector (one write per chunk per store)")
	fs.BoolVar(&f.skipCount, "skip-count", false, "leave out the service with count fences")
	fs.StringVar(&f.variantArgs, "variant-args", "", "flags of `projector run`, space-separated, for a variant of the service measured with id fences after it in every round (e.g. \"--batches-in-flight 1\"); the report gives variant / ids")
	fs.IntVar(&f.naiveChunks, "naive-chunks", 300, "chunks the naive projector writes per measurement, a sample of the corpus: it is slow, so it is compared per chunk")
	fs.IntVar(&f.batchRecords, "batch-records", run.batchRecords, "records per batch, for the service (run --batch-records) and the ceiling's writes")
	fs.IntVar(&f.maxBatchChunks, "max-batch-chunks", run.maxBatchChunks, "chunks per store write, for the service (run --max-batch-chunks) and the ceiling's writes")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Minute, "longest one measurement of the service may take to drain the topic")
	fs.DurationVar(&f.indexSettle, "index-settle", 5*time.Minute, "longest each measurement waits after its last write for Qdrant to finish optimizing its collection (status green) before the servers' CPU is read, so that the optimizer's work counts where it was caused and does not slow the next measurement; not part of the timed drain; 0: no wait")
	fs.StringVar(&f.peerClasspath, "peer-classpath", "", "also measure the Debezium JDBC sink on a standalone Kafka Connect worker, PostgreSQL only, with this Java class path (scripts/peer-bench.sh fetches it and sets it)")
	fs.IntVar(&f.peerBatchSize, "peer-batch-size", 2000, "the JDBC sink's batch.size and its worker's max.poll.records")
	fs.StringVar(&f.peerLogDir, "peer-log-dir", os.TempDir(), "where each run of the Connect worker leaves its log")
	fs.StringVar(&f.java, "java", "java", "the java command that runs the Connect worker")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write Go's CPU profile of the id-fence service's first run to this file (FILE.<n>p with several partition counts); go tool pprof reads it")
	fs.StringVar(&f.cpuOf, "cpu-of", defaultCPUOf, "servers whose CPU each measurement reads from /proc, as name=pid-file pairs separated by commas (scripts/services.sh's pid files by default, relative to the working directory); a pid file that cannot be read is left out")
	return forwarded
}

// serviceEnv returns the measured service's environment: base, with each
// forwarded flag that was set given as its PROJECTOR_* variable, which ps
// does not show, unlike arguments.
func serviceEnv(base []string, fs *flag.FlagSet, forwarded map[string]bool) []string {
	out := slices.Clone(base)
	fs.Visit(func(fl *flag.Flag) {
		if forwarded[fl.Name] {
			out = append(out, pconfig.EnvName(fl.Name)+"="+fl.Value.String())
		}
	})
	return out
}

func benchCommand(ctx context.Context, args []string, e env) error {
	var f benchFlags
	fs := newFlagSet("bench", "bench [flags] (each measurement writes a topic, a Qdrant collection, a PostgreSQL schema and Neo4j keys of its own, and removes them)", e)
	forwarded := f.register(fs)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	partitions, err := parseCounts(f.partitions)
	if err != nil {
		return fmt.Errorf("--partitions: %w", err)
	}
	processes, err := parseProcesses(f.cpuOf)
	if err != nil {
		return usageError(fmt.Errorf("--cpu-of: %w", err))
	}
	log, err := f.log.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the projector binary: %w", err)
	}
	kopts, err := f.kafka.opts(log)
	if err != nil {
		return err
	}
	driver, err := f.stores.neo4jDriver()
	if err != nil {
		return err
	}
	defer driver.Close(context.WithoutCancel(ctx))

	var peer bench.PeerSink
	if f.peerClasspath != "" {
		peer = &connectSink{java: f.java, classpath: f.peerClasspath, brokers: f.kafka.brokers,
			postgresDSN: f.stores.postgresDSN, batchSize: f.peerBatchSize, logDir: f.peerLogDir}
	}
	rep, err := bench.Run(ctx, bench.Config{
		Documents: f.documents, Partitions: partitions, Seed: f.seed, Runs: f.runs,
		SkipNaive: f.skipNaive, SkipCount: f.skipCount, VariantArgs: strings.Fields(f.variantArgs), NaiveChunks: f.naiveChunks,
		BatchRecords: f.batchRecords, MaxBatchChunks: f.maxBatchChunks, Dim: f.stores.vectorDim, Timeout: f.timeout,
		IndexSettle: f.indexSettle,
		Processes:   processes, CPUProfile: f.cpuProfile,
	}, bench.Deps{
		Kafka: kopts,
		OpenStores: func(ctx context.Context, collection, schema string) (*bench.Stores, error) {
			sf := f.stores
			sf.qdrantCollection, sf.postgresSchema = collection, schema
			st, err := sf.open(ctx)
			if err != nil {
				return nil, err
			}
			return &bench.Stores{Index: st.index, Graph: st.graph, Relational: st.relational}, nil
		},
		CloseStores: func(ctx context.Context, s *bench.Stores) {
			(&stores{index: s.Index, graph: s.Graph, relational: s.Relational}).close(ctx)
		},
		Neo4j: driver, Neo4jDatabase: f.stores.neo4jDatabase,
		Service:  bench.Service{Path: self, Env: serviceEnv(os.Environ(), fs, forwarded)},
		Progress: e.stderr,
		Peer:     peer,
	})
	if err != nil {
		return err
	}
	return rep.Print(e.stdout)
}

// defaultCPUOf are the pid files of the servers scripts/services.sh runs.
const defaultCPUOf = "qdrant=.services/run/qdrant.pid,neo4j=.services/run/neo4j.pid,postgres=.services/postgres/data/postmaster.pid,kafka=.services/run/kafka.pid"

// parseProcesses reads --cpu-of: name=pid-file pairs separated by commas.
func parseProcesses(s string) ([]bench.Process, error) {
	var out []bench.Process
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		name, file, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || file == "" {
			return nil, fmt.Errorf("%q: want name=pid-file", part)
		}
		out = append(out, bench.Process{Name: name, PIDFile: file})
	}
	return out, nil
}

// parseCounts reads a comma-separated list of positive whole numbers.
func parseCounts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive whole numbers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// neo4jDriver opens a driver of the graph's server with the store flags'
// credentials and TLS settings, for the benchmark's naive projector and
// clean-up, which need more than the adapter's writes.
func (s *storeFlags) neo4jDriver() (neo4j.DriverWithContext, error) {
	password := s.neo4jPassword
	if s.neo4jPasswordFile.secret != "" {
		if password != "" {
			return nil, errors.New("the Neo4j password is set twice: give --neo4j-password-file, or --neo4j-password (PROJECTOR_NEO4J_PASSWORD), not both")
		}
		password = s.neo4jPasswordFile.secret
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(s.neo4jUser, password, "")
	}
	var opts []func(*config.Config)
	if s.neo4jTLSCAFile != "" {
		cfg, err := clientTLS("--neo4j-tls", s.neo4jTLSCAFile, "", "")
		if err != nil {
			return nil, err
		}
		opts = append(opts, func(c *config.Config) { c.TlsConfig = cfg })
	}
	driver, err := neo4j.NewDriverWithContext(s.neo4jURI, auth, opts...)
	if err != nil {
		return nil, fmt.Errorf("neo4j driver: %w", err)
	}
	return driver, nil
}
