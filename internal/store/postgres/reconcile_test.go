package postgres

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/store/storetest"
)

func TestDecisionsPages(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	w := &project.Write{
		Live:      []project.Document{storetest.Doc("a", 1, "x"), storetest.Doc("b", 2, "x", "y"), storetest.Doc("p/c", 1)},
		Withdrawn: []project.Withdrawal{{Key: "p/d", Version: 4}},
	}
	if err := s.Apply(ctx, w, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE documents SET updated_at = now() - interval '2 hours' WHERE document_key IN ('a', 'p/c')`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		page reconcile.Page
		want string
	}{
		{"first page", reconcile.Page{Limit: 2}, "[{a 1 false 1} {b 2 false 2}]"},
		{"next page", reconcile.Page{After: "b", Limit: 2}, "[{p/c 1 false 0} {p/d 4 true 0}]"},
		{"prefix", reconcile.Page{Prefix: "p/", Limit: 10}, "[{p/c 1 false 0} {p/d 4 true 0}]"},
		{"since", reconcile.Page{Since: time.Now().Add(-time.Hour), Limit: 10}, "[{b 2 false 2} {p/d 4 true 0}]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Decisions(ctx, tt.page)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != tt.want {
				t.Errorf("Decisions = %v, want %s", got, tt.want)
			}
		})
	}
	known, err := s.Known(ctx, []string{"a", "p/d", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(known, map[string]bool{"a": true, "p/d": true}) {
		t.Errorf("Known = %v, want a and p/d", known)
	}
}

func TestRelationalHoldingsAndOrphans(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc("a", 2, "x", "y")}}, nil); err != nil {
		t.Fatal(err)
	}
	// Rows written by hand: an old version of a, and an unknown document.
	for _, row := range []struct {
		id  uuid.UUID
		key string
		v   int64
	}{{keys.ChunkID("a", 1, 0), "a", 1}, {keys.ChunkID("ghost", 1, 0), "ghost", 1}, {keys.ChunkID("ghost", 1, 1), "ghost", 1}} {
		if _, err := s.pool.Exec(ctx, `INSERT INTO chunks (chunk_id, document_key, version, ordinal, text, vector) VALUES ($1, $2, $3, 0, '', '')`, row.id, row.key, row.v); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.Holdings(ctx, []string{"a", "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h["a"].Chunks) != 3 || len(h["ghost"].Chunks) != 2 {
		t.Errorf("Holdings = %v, want 3 rows of a and 2 of ghost", h)
	}
	var pages [][]string
	if err := s.ScanKeys(ctx, "", 1, func(k []string) error { pages = append(pages, slices.Clone(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pages) != "[[a] [ghost]]" {
		t.Errorf("ScanKeys pages = %v, want [[a] [ghost]]", pages)
	}
	has, err := s.HasChunks(ctx, []uuid.UUID{keys.ChunkID("a", 2, 1), keys.ChunkID("a", 2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if !has[keys.ChunkID("a", 2, 1)] || len(has) != 1 {
		t.Errorf("HasChunks = %v, want only a's ordinal 1", has)
	}
	storetest.CheckCount(t, s, "")
	storetest.CheckCount(t, s, "gh")
	// DeleteDocuments removes only documents without a documents row.
	if err := s.DeleteDocuments(ctx, []string{"ghost", "a"}); err != nil {
		t.Fatal(err)
	}
	h, err = s.Holdings(ctx, []string{"a", "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h["a"].Chunks) != 3 || len(h["ghost"].Chunks) != 0 {
		t.Errorf("after DeleteDocuments: a holds %d rows, ghost %d; want 3 and 0", len(h["a"].Chunks), len(h["ghost"].Chunks))
	}
}

func TestReprojection(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	doc := storetest.Doc("a", 3, "x", "y")
	doc.CorrelationID = "corr-1"
	doc.Chunks[1].Metadata = map[string]any{"big": int64(1) << 60, "ratio": 0.25, "flag": true, "none": nil, "s": "t"}
	doc.Chunks[0].Metadata = nil
	// Each row keeps the generation whose embedder made its vector.
	doc.Chunks[0].Generation, doc.Chunks[1].Generation = 3, 2
	broken := storetest.Doc("b", 1, "x", "y")
	w := &project.Write{Live: []project.Document{doc, broken}, Withdrawn: []project.Withdrawal{{Key: "gone", Version: 5}}}
	if err := s.Apply(ctx, w, nil); err != nil {
		t.Fatal(err)
	}
	// b loses a chunk row and gains a foreign one at its ordinal 0.
	if _, err := s.pool.Exec(ctx, `DELETE FROM chunks WHERE chunk_id = $1`, broken.Chunks[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE chunks SET chunk_id = $1 WHERE chunk_id = $2`, uuid.MustParse("00000000-0000-4000-8000-000000000003"), broken.Chunks[0].ID); err != nil {
		t.Fatal(err)
	}
	got, incomplete, err := s.Reprojection(ctx, []string{"a", "b", "gone", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	want := &project.Write{Live: []project.Document{doc}, Withdrawn: []project.Withdrawal{{Key: "gone", Version: 5}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Reprojection =\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(incomplete, map[string][]int{"b": {0, 1}}) {
		t.Errorf("incomplete = %v, want b lacking ordinals 0 and 1", incomplete)
	}
	// Applying the rebuilt write changes no row.
	var before, after time.Time
	_ = s.pool.QueryRow(ctx, `SELECT updated_at FROM documents WHERE document_key = 'a'`).Scan(&before)
	if err := s.Apply(ctx, got, nil); err != nil {
		t.Fatal(err)
	}
	_ = s.pool.QueryRow(ctx, `SELECT updated_at FROM documents WHERE document_key = 'a'`).Scan(&after)
	if !after.Equal(before) {
		t.Errorf("updated_at moved from %v to %v when the rebuilt write was applied, want unchanged", before, after)
	}
}

func TestPruneLedger(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	entry := func(key string, v int64, op keys.Op) project.LedgerEntry {
		return project.LedgerEntry{IdempotencyKey: keys.IdempotencyKey(key, v, op), DocumentKey: key, Version: v, Op: op, Topic: "documents", Writer: "test"}
	}
	ledger := []project.LedgerEntry{
		entry("a", 1, keys.OpUpsert), entry("a", 2, keys.OpUpsert), entry("a", 3, keys.OpUpsert),
		entry("w", 1, keys.OpUpsert), entry("w", 2, keys.OpWithdraw),
		entry("fresh", 1, keys.OpUpsert), entry("fresh", 2, keys.OpUpsert),
	}
	w := &project.Write{Live: []project.Document{storetest.Doc("a", 3, "x"), storetest.Doc("fresh", 2, "x")}, Withdrawn: []project.Withdrawal{{Key: "w", Version: 2}}}
	if err := s.Apply(ctx, w, ledger); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE ledger SET projected_at = now() - interval '40 days' WHERE document_key <> 'fresh'`); err != nil {
		t.Fatal(err)
	}
	var batches []int64
	deleted, err := s.PruneLedger(ctx, time.Now().Add(-720*time.Hour), 1, func(n int64) { batches = append(batches, n) })
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, `SELECT idempotency_key FROM ledger ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		left = append(left, k)
	}
	wantLeft := []string{"document:a:v3:upsert", "document:fresh:v1:upsert", "document:fresh:v2:upsert", "document:w:v2:withdraw"}
	if deleted != 3 || fmt.Sprint(left) != fmt.Sprint(wantLeft) {
		t.Errorf("PruneLedger deleted %d, left %v; want 3 deleted, left %v (current versions and recent rows)", deleted, left, wantLeft)
	}
	if fmt.Sprint(batches) != "[1 2 3 3]" {
		t.Errorf("progress after each batch = %v, want [1 2 3 3] (batches of one row, then an empty one)", batches)
	}
}
