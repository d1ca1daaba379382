package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/qdrant/go-client/qdrant"
)

// TestIndexCollectionLimit makes the index refuse every upsert for a limit
// of the collection, not of any record: Qdrant's strict mode with an
// upsert_max_batchsize below the points of one upsert. The projector must
// report the limit (metric, /readyz) and commit nothing, and no good record
// may reach the dead-letter topic; once the limit is lifted, everything is
// projected.
func TestIndexCollectionLimit(t *testing.T) {
	w := newWorld(t, 1)
	ctx := context.Background()
	err := w.qd.CreateCollection(ctx, &qdrant.CreateCollection{
		CollectionName:   w.collection,
		VectorsConfig:    qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 384, Distance: qdrant.Distance_Cosine}),
		StrictModeConfig: &qdrant.StrictModeConfig{Enabled: qdrant.PtrOf(true), UpsertMaxBatchsize: qdrant.PtrOf(uint64(2))},
	})
	if err != nil {
		t.Fatalf("create collection in strict mode: %v", err)
	}
	info, err := w.qd.GetCollectionInfo(ctx, w.collection)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetConfig().GetStrictModeConfig().GetUpsertMaxBatchsize() != 2 {
		t.Fatalf("the collection's strict mode says upsert_max_batchsize %d, want the 2 it was created with", info.GetConfig().GetStrictModeConfig().GetUpsertMaxBatchsize())
	}
	const docs = 5
	var keys []string
	for i := range docs {
		k := w.key("doc-" + string(rune('a'+i)))
		keys = append(keys, k)
		w.produce(doc{Key: k, Version: 1, Chunks: []string{"one", "two", "three"}}.record())
	}
	p := w.start(nil)
	const limitSeries = `projector_store_limit_errors_total{limit="upsert_max_batchsize",store="index"}`
	m := p.waitMetrics(time.Minute, "the index's limit reported", func(m map[string]float64) bool { return m[limitSeries] > 0 })
	if got := m[`projector_dlq_total{reason="store_rejected"}`]; got != 0 {
		t.Errorf("store_rejected dead letters while the collection refuses = %v, want 0", got)
	}
	code, body := p.get("/readyz")
	if code != 503 || !strings.Contains(body, "upsert_max_batchsize") {
		t.Errorf("/readyz = %d %q, want 503 naming upsert_max_batchsize", code, body)
	}
	if lag, err := w.lag(); err != nil || lag != docs {
		t.Errorf("lag while the collection refuses = %d (%v), want %d: nothing committed", lag, err, docs)
	}

	err = w.qd.UpdateCollection(ctx, &qdrant.UpdateCollection{
		CollectionName:   w.collection,
		StrictModeConfig: &qdrant.StrictModeConfig{Enabled: qdrant.PtrOf(false)},
	})
	if err != nil {
		t.Fatalf("lift strict mode: %v", err)
	}
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	if letters := w.deadLetters(); len(letters) != 0 {
		t.Errorf("dead letters = %d (first: %s), want none: the limit was the collection's", len(letters), header(letters[0], "projector-error-detail"))
	}
	var n int
	if err := w.pg.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != docs {
		t.Errorf("ledger rows = %d, want %d", n, docs)
	}
}
