package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/testenv"
)

// The benchmarks below write the corpus's batches (the service's default
// 500 records, about 2,300 chunks) to one real store, under fresh keys
// each iteration, so every write inserts as a backlog does. They compare
// ways of writing a batch to a store within one run, the adapter's
// against variants written here:
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
}

// runVariants writes each variant's batches of a fresh corpus (the same
// corpus under keys of its own) every iteration, batch by batch in turn,
// the first variant going first in one batch and last in the next, so the
// variants share the machine's ups and downs. It times only the writes and
// reports each variant's chunks per second and its ratio to the first.
func runVariants(b *testing.B, prefix string, variants ...variant) {
	docs := testenv.Size(b, "STORE_BENCH_DOCUMENTS", 1000, 1)
	ctx := context.Background()
	wr := newWriter(storeBenchDim)
	spent := make([]time.Duration, len(variants))
	var chunks int
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		writes := make([][]*project.Write, len(variants))
		for v := range variants {
			c := Generate(docs, uint64(i), fmt.Sprintf("%s%s-%d-%d/", prefix, b.Name(), v, i))
			var err error
			if writes[v], err = wr.batches(c.Records, 500, 4096); err != nil {
				b.Fatal(err)
			}
			if v == 0 {
				chunks += c.Chunks
			}
		}
		b.StartTimer()
		for j := range writes[0] {
			for k := range variants {
				v := (j + k) % len(variants)
				start := time.Now()
				if err := variants[v].apply(ctx, writes[v][j]); err != nil {
					b.Fatalf("%s: %v", variants[v].name, err)
				}
				spent[v] += time.Since(start)
			}
		}
	}
	for v, x := range variants {
		b.ReportMetric(float64(chunks)/spent[v].Seconds(), x.name+"-chunks/s")
		if v > 0 {
			b.ReportMetric(spent[0].Seconds()/spent[v].Seconds(), x.name+"-speedup")
		}
	}
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
			variants = append(variants, variant{fmt.Sprintf("points=%d", size), open(b, size, 4, 0).Apply})
		}
		runVariants(b, "", variants...)
	})
	b.Run("upsert-concurrency", func(b *testing.B) {
		var variants []variant
		for _, n := range []int{1, 2, 4, 8} {
			variants = append(variants, variant{fmt.Sprintf("in-flight=%d", n), open(b, 256, n, 0).Apply})
		}
		runVariants(b, "", variants...)
	})
	// Qdrant applies one shard's updates one at a time: more shards let
	// concurrent upserts be applied in parallel.
	b.Run("shards", func(b *testing.B) {
		var variants []variant
		for _, n := range []int{1, 2, 4} {
			variants = append(variants, variant{fmt.Sprintf("shards=%d", n), open(b, 256, 4, n).Apply})
		}
		runVariants(b, "", variants...)
	})
}

// BenchmarkStoreGraph compares the adapter's one UNWIND statement over all
// chunks of a batch with statements of bounded rows in the same
// transaction.
func BenchmarkStoreGraph(b *testing.B) {
	uri := testenv.Neo4jURI(b)
	user, password := os.Getenv("PROJECTOR_NEO4J_USER"), os.Getenv("PROJECTOR_NEO4J_PASSWORD")
	gr, err := graph.Open(graph.Config{URI: uri, User: user, Password: password})
	if err != nil {
		b.Fatal(err)
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	driver, err := neo4j.NewDriverWithContext(uri, auth)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("storebench-%d-", time.Now().UnixNano())
	defer func() {
		sess := driver.NewSession(ctx, neo4j.SessionConfig{})
		res, err := sess.Run(ctx, `
MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p)
CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"p": prefix})
		if err == nil {
			_, _ = res.Consume(ctx)
		}
		_ = sess.Close(ctx)
		_ = driver.Close(ctx)
		_ = gr.Close(ctx)
	}()
	if err := gr.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	variants := []variant{{"adapter", gr.Apply}}
	for _, rows := range []int{250, 1000} {
		variants = append(variants, variant{fmt.Sprintf("unwind-rows=%d", rows), func(ctx context.Context, w *project.Write) error {
			return graphSplit(ctx, driver, w, rows)
		}})
	}
	runVariants(b, prefix, variants...)
}

// The adapter's statements (internal/store/graph).
const (
	benchMergeDocuments = `
UNWIND $docs AS d
MERGE (doc:Document {key: d.key})
SET doc.version = d.version, doc.title = d.title, doc.source = d.source,
	doc.metadata = d.metadata, doc.content_hash = d.content_hash`
	benchMergeChunks = `
UNWIND $chunks AS c
MATCH (doc:Document {key: c.document_key})
MERGE (ch:Chunk {id: c.id})
SET ch.document_key = c.document_key, ch.version = c.version, ch.ordinal = c.ordinal,
	ch.text = c.text, ch.metadata = c.metadata
MERGE (doc)-[:HAS_CHUNK]->(ch)`
	benchDeleteOtherChunks = `
UNWIND $docs AS d
MATCH (ch:Chunk {document_key: d.key})
WHERE NOT ch.id IN d.ids
DETACH DELETE ch`
	benchDeleteDocuments = `
UNWIND $keys AS k
MATCH (doc:Document {key: k})
DETACH DELETE doc`
)

// graphSplit writes w as the adapter does, with the chunks merged in
// statements of at most rows chunks.
func graphSplit(ctx context.Context, driver neo4j.DriverWithContext, w *project.Write, rows int) error {
	var docs, chunks, keep []any
	for _, d := range w.Live {
		md, _ := jsonText(d.Metadata)
		docs = append(docs, map[string]any{"key": d.Key, "version": d.Version, "title": d.Title, "source": d.Source, "metadata": nilIfEmpty(md), "content_hash": d.ContentHash})
		ids := make([]string, len(d.Chunks))
		for i, c := range d.Chunks {
			cmd, _ := jsonText(c.Metadata)
			ids[i] = c.ID.String()
			chunks = append(chunks, map[string]any{"id": ids[i], "document_key": d.Key, "version": c.Version, "ordinal": int64(c.Ordinal), "text": c.Text, "metadata": nilIfEmpty(cmd)})
		}
		keep = append(keep, map[string]any{"key": d.Key, "ids": ids})
	}
	var withdrawn []any
	for _, d := range w.Withdrawn {
		withdrawn = append(withdrawn, d.Key)
		keep = append(keep, map[string]any{"key": d.Key, "ids": []string{}})
	}
	sess := driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer sess.Close(ctx)
	_, err := sess.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		run := func(q, name string, rows []any) error {
			if len(rows) == 0 {
				return nil
			}
			res, err := tx.Run(ctx, q, map[string]any{name: rows})
			if err != nil {
				return err
			}
			_, err = res.Consume(ctx)
			return err
		}
		if err := run(benchMergeDocuments, "docs", docs); err != nil {
			return nil, err
		}
		for from := 0; from < len(chunks); from += rows {
			if err := run(benchMergeChunks, "chunks", chunks[from:min(from+rows, len(chunks))]); err != nil {
				return nil, err
			}
		}
		if err := run(benchDeleteOtherChunks, "docs", keep); err != nil {
			return nil, err
		}
		return nil, run(benchDeleteDocuments, "keys", withdrawn)
	})
	return err
}

// BenchmarkStoreRelational compares the adapter's Apply, which sends the
// chunk rows by COPY into a staging table, with the same transaction
// sending them as unnest() arrays, the adapter's way before.
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
	runVariants(b, "",
		variant{"unnest", func(ctx context.Context, w *project.Write) error { return applyUnnest(ctx, rel, w) }},
		variant{"adapter-copy", func(ctx context.Context, w *project.Write) error { return rel.Apply(ctx, w, nil) }},
	)
}

// applyUnnest writes w as the adapter did before it used COPY: every row
// as unnest() arrays, in one round trip.
func applyUnnest(ctx context.Context, rel *postgres.Store, w *project.Write) error {
	var (
		ids, chunkKeys, texts, chunkMD []string
		versions                       []int64
		ordinals                       []int32
		vectors                        [][]byte
	)
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			md, _ := jsonText(c.Metadata)
			ids = append(ids, c.ID.String())
			chunkKeys = append(chunkKeys, c.DocumentKey)
			versions = append(versions, c.Version)
			ordinals = append(ordinals, int32(c.Ordinal))
			texts = append(texts, c.Text)
			chunkMD = append(chunkMD, md)
			vectors = append(vectors, postgres.EncodeVector(c.Vector))
		}
	}
	docs := documentRowsOf(w)
	batch := &pgx.Batch{}
	batch.Queue(`
INSERT INTO documents AS d (document_key, version, status, content_hash, title, source, metadata, chunk_count, correlation_id)
SELECT k, v, st, h, ti, so, NULLIF(md, '')::jsonb, n, c
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[])
	AS u(k, v, st, h, ti, so, md, n, c)
ON CONFLICT (document_key) DO UPDATE SET
	version = excluded.version, status = excluded.status, content_hash = excluded.content_hash,
	title = excluded.title, source = excluded.source, metadata = excluded.metadata,
	chunk_count = excluded.chunk_count, correlation_id = excluded.correlation_id, updated_at = now()
WHERE (d.version, d.status, d.content_hash, d.title, d.source, d.metadata, d.chunk_count)
	IS DISTINCT FROM (excluded.version, excluded.status, excluded.content_hash, excluded.title, excluded.source, excluded.metadata, excluded.chunk_count)`,
		docs.keys, docs.versions, docs.statuses, docs.hashes, docs.titles, docs.sources, docs.metadata, docs.counts, docs.correlations)
	if len(ids) > 0 {
		batch.Queue(`
INSERT INTO chunks AS c (chunk_id, document_key, version, ordinal, text, metadata, vector)
SELECT id, k, v, o, t, NULLIF(md, '')::jsonb, vec
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::text[], $6::text[], $7::bytea[])
	AS u(id, k, v, o, t, md, vec)
ON CONFLICT (chunk_id) DO UPDATE SET
	document_key = excluded.document_key, version = excluded.version, ordinal = excluded.ordinal,
	text = excluded.text, metadata = excluded.metadata, vector = excluded.vector
WHERE (c.document_key, c.version, c.ordinal, c.text, c.metadata, c.vector)
	IS DISTINCT FROM (excluded.document_key, excluded.version, excluded.ordinal, excluded.text, excluded.metadata, excluded.vector)`,
			ids, chunkKeys, versions, ordinals, texts, chunkMD, vectors)
	}
	batch.Queue(`DELETE FROM chunks WHERE document_key = ANY($1::text[]) AND chunk_id NOT IN (SELECT unnest($2::uuid[]))`, docs.keys, ids)
	return pgx.BeginFunc(ctx, rel.Pool(), func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
}

type documentRows struct {
	keys, statuses, hashes, titles, sources, metadata, correlations []string
	versions                                                        []int64
	counts                                                          []int32
}

func documentRowsOf(w *project.Write) documentRows {
	var r documentRows
	add := func(key string, version int64, status, hash, title, source, md string, n int, correlation string) {
		r.keys = append(r.keys, key)
		r.versions = append(r.versions, version)
		r.statuses = append(r.statuses, status)
		r.hashes = append(r.hashes, hash)
		r.titles = append(r.titles, title)
		r.sources = append(r.sources, source)
		r.metadata = append(r.metadata, md)
		r.counts = append(r.counts, int32(n))
		r.correlations = append(r.correlations, correlation)
	}
	for _, d := range w.Live {
		md, _ := jsonText(d.Metadata)
		add(d.Key, d.Version, "live", d.ContentHash, d.Title, d.Source, md, len(d.Chunks), d.CorrelationID)
	}
	for _, d := range w.Withdrawn {
		add(d.Key, d.Version, "withdrawn", "", "", "", "", 0, "")
	}
	return r
}
