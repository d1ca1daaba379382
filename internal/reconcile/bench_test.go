package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

// BenchmarkReconcile reconciles stores that agree: every document is read
// from the decision store, every store is read by key, and every store is
// counted (or scanned) for unknown documents. It reports documents per second, and the
// time each store took to answer; "stores=graph,relational" leaves the index
// out, to show its share, and "index-scanned" scans the index as a run
// with --key-prefix does.
func BenchmarkReconcile(b *testing.B) {
	// RECONCILE_BENCH_DOCUMENTS documents of two chunks each; the default
	// keeps `make bench` short, docs/benchmarks.md was measured with 100000.
	n := testenv.Size(b, "RECONCILE_BENCH_DOCUMENTS", 2000, 1)
	stores, prefix := openBenchStores(b)
	load(b, stores, prefix, n)
	b.Run("stores=index,graph,relational", func(b *testing.B) {
		benchRun(b, stores.relational, prefix, n, stores.index, stores.graph, stores.relational)
	})
	b.Run("stores=graph,relational", func(b *testing.B) {
		benchRun(b, stores.relational, prefix, n, stores.graph, stores.relational)
	})
	b.Run("stores=index,graph,relational/index-scanned", func(b *testing.B) {
		benchRun(b, stores.relational, prefix, n, scanned{stores.index}, stores.graph, stores.relational)
	})
}

// scanned is a store that cannot count what it holds, so a run scans it.
type scanned struct{ reconcile.Store }

func benchRun(b *testing.B, decisions reconcile.Decisions, prefix string, n int, stores ...reconcile.Store) {
	timed := make([]*timedStore, len(stores))
	all := make([]reconcile.Store, len(stores))
	for i, s := range stores {
		_, private := s.(*index.Store)
		timed[i] = &timedStore{Store: s, whole: private}
		all[i] = timed[i]
	}
	r := reconcile.New(reconcile.Config{Prefix: prefix, PageSize: 1000, ProgressEvery: n + 1}, zap.NewNop(),
		reconcile.Deps{Decisions: decisions, Stores: all})
	var elapsed time.Duration
	for range b.N {
		sum, err := r.Run(context.Background(), discard{})
		if err != nil {
			b.Fatal(err)
		}
		if sum.Documents != int64(n) || sum.Total() != 0 {
			b.Fatalf("reconcile compared %d documents and found %d discrepancies, want %d and 0", sum.Documents, sum.Total(), n)
		}
		elapsed += sum.Duration
	}
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "docs/s")
	for _, t := range timed {
		b.ReportMetric(t.holdings.Seconds()/float64(b.N), t.Name()+"-read-s/op")
		b.ReportMetric(t.scan.Seconds()/float64(b.N), t.Name()+"-scan-s/op")
	}
}

type discard struct{}

func (discard) Report(*reconcile.Discrepancy) error { return nil }

type benchStores struct {
	index      *index.Store
	graph      *graph.Store
	relational *postgres.Store
}

// openBenchStores opens a private collection and schema and a key prefix
// of the shared graph, all removed when the benchmark ends.
func openBenchStores(b *testing.B) (*benchStores, string) {
	ctx := context.Background()
	id := time.Now().UnixNano()
	idx, err := index.Open(index.Config{Addr: testenv.QdrantAddr(b), Collection: fmt.Sprintf("bench_%d", id), Dim: storetest.Dim, UpsertBatch: 1024})
	if err != nil {
		b.Fatal(err)
	}
	uri := testenv.Neo4jURI(b)
	gr, err := graph.Open(graph.Config{URI: uri, User: os.Getenv("PROJECTOR_NEO4J_USER"), Password: os.Getenv("PROJECTOR_NEO4J_PASSWORD")})
	if err != nil {
		b.Fatal(err)
	}
	schema := fmt.Sprintf("bench_%d", id)
	rel, err := postgres.Open(ctx, testenv.PostgresDSN(b), schema)
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("bench-%d/", id)
	b.Cleanup(func() {
		_ = idx.Client().DeleteCollection(ctx, idx.Collection())
		_ = idx.Close()
		// CALL ... IN TRANSACTIONS needs an auto-commit transaction.
		driver, err := neo4j.NewDriverWithContext(uri, neo4j.NoAuth())
		if err == nil {
			sess := driver.NewSession(ctx, neo4j.SessionConfig{})
			res, err := sess.Run(ctx, `
MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p)
CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"p": prefix})
			if err == nil {
				_, _ = res.Consume(ctx)
			}
			_ = sess.Close(ctx)
			_ = driver.Close(ctx)
		}
		_ = gr.Close(ctx)
		_, _ = rel.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		rel.Close()
	})
	for _, migrate := range []func(context.Context) error{idx.Migrate, gr.Migrate, rel.Migrate} {
		if err := migrate(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return &benchStores{index: idx, graph: gr, relational: rel}, prefix
}

// load writes n documents of two chunks into the three stores through the
// adapters, in batches, the way the projector would.
func load(b *testing.B, s *benchStores, prefix string, n int) {
	ctx := context.Background()
	start := time.Now()
	const batch = 2000
	for from := 0; from < n; from += batch {
		w := &project.Write{}
		for i := from; i < min(from+batch, n); i++ {
			w.Live = append(w.Live, storetest.Doc(fmt.Sprintf("%sdoc-%07d", prefix, i), 1, "first chunk", "second chunk"))
		}
		if err := s.index.Apply(ctx, w); err != nil {
			b.Fatal(err)
		}
		if err := s.graph.Apply(ctx, w); err != nil {
			b.Fatal(err)
		}
		if err := s.relational.Apply(ctx, w, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("loaded %d documents (%d chunks) into the three stores in %s", n, 2*n, time.Since(start).Round(time.Second))
}

// timedStore adds up the time a store takes to answer reads by key and to
// scan its keys (without the time of the scan's callback) or count what
// it holds.
type timedStore struct {
	reconcile.Store
	// whole counts the whole store whatever the prefix: the index's
	// collection is the benchmark's own, so it holds the prefix's documents
	// only, as a deployment's collection holds its own, and Qdrant counts
	// without a prefix only.
	whole          bool
	holdings, scan time.Duration
}

func (t *timedStore) Holdings(ctx context.Context, keys []string) (map[string]reconcile.Holding, error) {
	start := time.Now()
	defer func() { t.holdings += time.Since(start) }()
	return t.Store.Holdings(ctx, keys)
}

func (t *timedStore) ScanKeys(ctx context.Context, prefix string, pageSize int, fn func([]string) error) error {
	start := time.Now()
	var inCallback time.Duration
	err := t.Store.ScanKeys(ctx, prefix, pageSize, func(keys []string) error {
		at := time.Now()
		defer func() { inCallback += time.Since(at) }()
		return fn(keys)
	})
	t.scan += time.Since(start) - inCallback
	return err
}

func (t *timedStore) Count(ctx context.Context, prefix string) (int64, bool, error) {
	c, ok := t.Store.(reconcile.Counter)
	if !ok {
		return 0, false, nil
	}
	if t.whole {
		prefix = ""
	}
	start := time.Now()
	defer func() { t.scan += time.Since(start) }()
	return c.Count(ctx, prefix)
}
