package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/testenv"
)

// The benchmarks below write the corpus's batches (the service's default
// 500 records, about 2,300 chunks) to one real store, under fresh keys
// each iteration, so every write inserts as a backlog does. They compare
// ways of writing a batch to a store within one run, every one of them an
// adapter's own (selected by the adapter's configuration), never a copy of
// its statements:
//
//	eval "$(scripts/services.sh env)"
//	go test ./internal/bench/ -run '^$' -bench Store -benchtime 4x -count 3
//
// STORE_BENCH_DOCUMENTS sets the documents per iteration (default 1,000).

const storeBenchDim = 384

// variant is one way of writing a batch to a store.
type variant struct {
	name  string
	apply func(ctx context.Context, w *project.Write) error
	// noSetup skips the untimed writes a workload makes before the timed
	// ones: the variant writes its timed batches under keys the store has
	// never held (the graph's CREATE-only floor cannot write anything else).
	noSetup bool
}

// workload turns one writer's batches of the corpus into what is written
// untimed first (before) and the writes that are timed.
type workload func(batches []*project.Write) (before, timed []*project.Write)

// asIs times the corpus's batches as they are: first versions, later
// versions and withdrawals, as a backlog has them.
func asIs(batches []*project.Write) (before, timed []*project.Write) { return nil, batches }

// firstVersions times only the first version of each document: every
// document is new to the store.
func firstVersions(batches []*project.Write) (before, timed []*project.Write) {
	seen := map[string]bool{}
	for _, w := range batches {
		first := &project.Write{}
		for _, d := range w.Live {
			if d.Version == 1 && !seen[d.Key] {
				first.Live = append(first.Live, d)
			}
			seen[d.Key] = true
		}
		for _, d := range w.Withdrawn {
			seen[d.Key] = true
		}
		if len(first.Live) > 0 {
			timed = append(timed, first)
		}
	}
	return nil, timed
}

// nextVersions writes the first versions untimed, then times a new
// version of each of those documents with the same texts: every document
// is stored, and every chunk of the timed write is new.
func nextVersions(batches []*project.Write) (before, timed []*project.Write) {
	_, before = firstVersions(batches)
	for _, w := range before {
		next := &project.Write{Live: make([]project.Document, len(w.Live))}
		for i, d := range w.Live {
			d.Version++
			d.ContentHash += "-next"
			d.Chunks = slices.Clone(d.Chunks)
			for j := range d.Chunks {
				d.Chunks[j].Version = d.Version
				d.Chunks[j].ID = keys.ChunkID(d.Key, d.Version, d.Chunks[j].Ordinal)
			}
			next.Live[i] = d
		}
		timed = append(timed, next)
	}
	return before, timed
}

// runVariants writes each variant's batches of a fresh corpus (the same
// corpus under keys of its own) every iteration, batch by batch in turn,
// the first variant going first in one batch and last in the next, so the
// variants share the machine's ups and downs. With more than one writer
// the corpus is split by document as partitions split it, and each
// writer's batch of a round is written at once, as partition workers
// write. It times only load's timed writes and reports each variant's
// chunks per second and its ratio to the first, and the CPU per chunk of
// the benchmark's process (the adapter's encoding and the driver) and of
// server, the store's process (by its services' pid file, left out when
// it cannot be read). The server's figure counts whatever else it served
// meanwhile: on a shared machine, compare it within one run.
func runVariants(b *testing.B, prefix string, writers int, load workload, server string, variants ...variant) {
	docs := testenv.Size(b, "STORE_BENCH_DOCUMENTS", 1000, 1)
	ctx := context.Background()
	wr := newWriter(storeBenchDim)
	spent := make([]time.Duration, len(variants))
	serverPID, serverErr := readPID(filepath.Join("..", "..", ".services", server))
	selfCPU, serverCPU := make([]time.Duration, len(variants)), make([]time.Duration, len(variants))
	// cpu adds (sign 1) or takes away (sign -1) the CPU spent so far by the
	// benchmark and the server, reading the server's outside the
	// benchmark's window: walking /proc costs the benchmark CPU too.
	cpu := func(v int, sign time.Duration) {
		server := func() {
			if serverErr == nil {
				if t, err := cpuOf(serverPID); err == nil {
					serverCPU[v] += sign * t
				}
			}
		}
		if sign < 0 {
			server()
		}
		selfCPU[v] += sign * testenv.ProcessCPU()
		if sign > 0 {
			server()
		}
	}
	var chunks int
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		timed := make([][][]*project.Write, len(variants)) // variant, writer, round
		rounds := 0
		for v, x := range variants {
			c := Generate(docs, uint64(i), fmt.Sprintf("%s%s-%d-%d/", prefix, b.Name(), v, i))
			for _, recs := range byPartition(c.Records, writers) {
				batches, err := wr.batches(recs, 500, 4096)
				if err != nil {
					b.Fatal(err)
				}
				before, ws := load(batches)
				for _, w := range before {
					if x.noSetup {
						break
					}
					if err := x.apply(ctx, w); err != nil {
						b.Fatalf("%s, untimed: %v", x.name, err)
					}
				}
				timed[v] = append(timed[v], ws)
				rounds = max(rounds, len(ws))
				for _, w := range ws {
					if v == 0 {
						chunks += chunksOf(w)
					}
				}
			}
		}
		// The setup's garbage is collected before the timed writes, so the
		// client's CPU counts the writes' own.
		runtime.GC()
		b.StartTimer()
		for j := range rounds {
			for k := range variants {
				v := (j + k) % len(variants)
				var g errgroup.Group
				cpu(v, -1)
				start := time.Now()
				for _, ws := range timed[v] {
					if j < len(ws) {
						g.Go(func() error { return variants[v].apply(ctx, ws[j]) })
					}
				}
				if err := g.Wait(); err != nil {
					b.Fatalf("%s: %v", variants[v].name, err)
				}
				spent[v] += time.Since(start)
				cpu(v, 1)
			}
		}
	}
	for v, x := range variants {
		b.ReportMetric(float64(chunks)/spent[v].Seconds(), x.name+"-chunks/s")
		if v > 0 {
			b.ReportMetric(spent[0].Seconds()/spent[v].Seconds(), x.name+"-speedup")
		}
		b.ReportMetric(float64(selfCPU[v].Microseconds())/float64(chunks), x.name+"-client-µs/chunk")
		if serverErr == nil {
			b.ReportMetric(float64(serverCPU[v].Microseconds())/float64(chunks), x.name+"-server-µs/chunk")
		}
	}
}

// chunksOf counts the chunks w writes.
func chunksOf(w *project.Write) int {
	n := 0
	for _, d := range w.Live {
		n += len(d.Chunks)
	}
	return n
}

// BenchmarkStoreIndex compares points per upsert call, and upsert calls
// of one batch in flight at once.
func BenchmarkStoreIndex(b *testing.B) {
	addr := testenv.QdrantAddr(b)
	ctx := context.Background()
	open := func(b *testing.B, size, concurrency, shards int) *index.Store {
		collection := fmt.Sprintf("storebench_%d", time.Now().UnixNano())
		idx, err := index.Open(index.Config{Addr: addr, Collection: collection, Dim: storeBenchDim,
			UpsertBatch: size, UpsertConcurrency: concurrency, Shards: shards})
		if err != nil {
			b.Fatal(err)
		}
		if err := idx.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = idx.Client().DeleteCollection(ctx, collection)
			_ = idx.Close()
		})
		return idx
	}
	b.Run("upsert-batch", func(b *testing.B) {
		var variants []variant
		for _, size := range []int{256, 64, 1024} {
			variants = append(variants, variant{name: fmt.Sprintf("points=%d", size), apply: open(b, size, 4, 0).Apply})
		}
		runVariants(b, "", 1, asIs, "run/qdrant.pid", variants...)
	})
	b.Run("upsert-concurrency", func(b *testing.B) {
		var variants []variant
		for _, n := range []int{1, 2, 4, 8} {
			variants = append(variants, variant{name: fmt.Sprintf("in-flight=%d", n), apply: open(b, 256, n, 0).Apply})
		}
		runVariants(b, "", 1, asIs, "run/qdrant.pid", variants...)
	})
	// Qdrant applies one shard's updates one at a time: more shards let
	// concurrent upserts be applied in parallel.
	b.Run("shards", func(b *testing.B) {
		var variants []variant
		for _, n := range []int{1, 2, 4} {
			variants = append(variants, variant{name: fmt.Sprintf("shards=%d", n), apply: open(b, 256, 4, n).Apply})
		}
		runVariants(b, "", 1, asIs, "run/qdrant.pid", variants...)
	})
}

// BenchmarkStoreGraph compares the graph adapter's ways of writing chunks
// (graph.ChunkWrites), with and without the chunk text, on new documents
// and on new versions of stored documents, with one writer and with two
// at once. Every speedup is against the first variant, all-MERGE with the
// text (the adapter before issue #16). The CREATE-only floor is the
// adapter's graph.CreateOnlyUnsafe: it creates the same chunks, removes
// nothing, and is not repeat-safe, so it writes its batches of new
// versions under keys never stored (nothing to remove, nothing to look up).
func BenchmarkStoreGraph(b *testing.B) {
	uri := testenv.Neo4jURI(b)
	user, password := os.Getenv("PROJECTOR_NEO4J_USER"), os.Getenv("PROJECTOR_NEO4J_PASSWORD")
	ctx := context.Background()
	open := func(mode graph.ChunkWrites, text bool) *graph.Store {
		gr, err := graph.Open(graph.Config{URI: uri, User: user, Password: password, Chunks: mode, ChunkText: text})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = gr.Close(ctx) })
		return gr
	}
	variants := []variant{
		{name: "merge-all+text", apply: open(graph.MergeAll, true).Apply},
		{name: "create-new+text", apply: open(graph.CreateNewVersions, true).Apply},
		{name: "floor+text", apply: open(graph.CreateOnlyUnsafe, true).Apply, noSetup: true},
		{name: "create-new", apply: open(graph.CreateNewVersions, false).Apply},
		{name: "floor", apply: open(graph.CreateOnlyUnsafe, false).Apply, noSetup: true},
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	driver, err := neo4j.NewDriverWithContext(uri, auth)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = driver.Close(ctx) })
	gr := open(graph.CreateNewVersions, false)
	if err := gr.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, load := range []struct {
		name string
		fn   workload
	}{{"new-documents", firstVersions}, {"new-versions", nextVersions}} {
		for _, writers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/writers=%d", load.name, writers), func(b *testing.B) {
				prefix := fmt.Sprintf("storebench-%d-", time.Now().UnixNano())
				b.Cleanup(func() { removeGraph(ctx, driver, prefix) })
				runVariants(b, prefix, writers, load.fn, "run/neo4j.pid", variants...)
			})
		}
	}
}

// removeGraph deletes what a benchmark wrote under prefix, a bounded
// transaction at a time.
func removeGraph(ctx context.Context, driver neo4j.DriverWithContext, prefix string) {
	sess := driver.NewSession(ctx, neo4j.SessionConfig{})
	defer sess.Close(ctx)
	for _, q := range []string{
		`MATCH (n:Chunk) WHERE n.document_key STARTS WITH $p CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`,
		`MATCH (n:Document) WHERE n.key STARTS WITH $p CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`,
	} {
		if res, err := sess.Run(ctx, q, map[string]any{"p": prefix}); err == nil {
			_, _ = res.Consume(ctx)
		}
	}
}

// BenchmarkStoreRelational measures the relational adapter's Apply (chunk
// rows by COPY into a staging table); the unnest() transaction it was
// compared with when COPY was chosen is no longer kept (docs/benchmarks.md).
func BenchmarkStoreRelational(b *testing.B) {
	ctx := context.Background()
	schema := fmt.Sprintf("storebench_%d", time.Now().UnixNano())
	rel, err := postgres.Open(ctx, testenv.PostgresDSN(b), schema)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = rel.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		rel.Close()
	}()
	if err := rel.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	runVariants(b, "", 1, asIs, "postgres/data/postmaster.pid",
		variant{name: "adapter", apply: func(ctx context.Context, w *project.Write) error { return rel.Apply(ctx, w, nil) }},
	)
}
