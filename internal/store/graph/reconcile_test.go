package graph

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

func TestReconcileReads(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	a, b, c := prefix+"a", prefix+"b", prefix+"c"
	w := &project.Write{Live: []project.Document{storetest.Doc(a, 2, "x", "y"), storetest.Doc(b, 1, "z"), storetest.Doc(c, 1)}}
	if err := s.Apply(ctx, w); err != nil {
		t.Fatal(err)
	}
	foreign := uuid.MustParse("00000000-0000-4000-8000-000000000002")
	// A foreign chunk linked to a, a detached chunk of b's, and an unknown
	// document's chunk without any Document node.
	for _, q := range []struct {
		cypher string
		params map[string]any
	}{
		{`MATCH (d:Document {key: $k}) CREATE (d)-[:HAS_CHUNK]->(:Chunk {id: $id, document_key: $k, version: 2})`, map[string]any{"k": a, "id": foreign.String()}},
		{`MATCH (:Document {key: $k})-[r:HAS_CHUNK]->(:Chunk {id: $id}) DELETE r`, map[string]any{"k": b, "id": keys.ChunkID(b, 1, 0).String()}},
		{`CREATE (:Chunk {id: $id, document_key: $k, version: 1})`, map[string]any{"k": prefix + "unknown", "id": keys.ChunkID(prefix+"unknown", 1, 0).String()}},
	} {
		if _, err := neo4j.ExecuteQuery(ctx, s.driver, q.cypher, q.params, neo4j.EagerResultTransformer); err != nil {
			t.Fatal(err)
		}
	}

	h, err := s.Holdings(ctx, []string{a, b, c, prefix + "unknown", prefix + "nothing"})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(k string) string {
		hold := h[k]
		var chunks []string
		for _, ch := range hold.Chunks {
			chunks = append(chunks, fmt.Sprintf("%s@%d detached=%v", ch.ID, ch.Version, ch.Detached))
		}
		slices.Sort(chunks)
		return fmt.Sprintf("records=%v present=%v version=%d chunks=%v", hold.Records, hold.Present, hold.Version, chunks)
	}
	want := map[string]string{
		a: fmt.Sprintf("records=true present=true version=2 chunks=%v", sortedStrings(
			keys.ChunkID(a, 2, 0).String()+"@2 detached=false", keys.ChunkID(a, 2, 1).String()+"@2 detached=false", foreign.String()+"@2 detached=false")),
		b:                  fmt.Sprintf("records=true present=true version=1 chunks=[%s@1 detached=true]", keys.ChunkID(b, 1, 0)),
		c:                  "records=true present=true version=1 chunks=[]",
		prefix + "unknown": fmt.Sprintf("records=true present=false version=0 chunks=[%s@1 detached=true]", keys.ChunkID(prefix+"unknown", 1, 0)),
		prefix + "nothing": "records=true present=false version=0 chunks=[]",
	}
	for k, w := range want {
		if got := describe(k); got != w {
			t.Errorf("Holdings[%s] = %s, want %s", k, got, w)
		}
	}

	var pages [][]string
	err = s.ScanKeys(ctx, prefix, 2, func(keys []string) error {
		pages = append(pages, slices.Clone(keys))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantPages := [][]string{{a, b}, {c}, {a, b}, {prefix + "unknown"}}
	if fmt.Sprint(pages) != fmt.Sprint(wantPages) {
		t.Errorf("ScanKeys pages = %v, want %v (Document keys, then Chunk keys, in key order)", pages, wantPages)
	}

	has, err := s.HasChunks(ctx, []uuid.UUID{keys.ChunkID(a, 2, 0), keys.ChunkID(b, 1, 0), foreign, keys.ChunkID(prefix+"unknown", 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !has[keys.ChunkID(a, 2, 0)] || !has[foreign] || len(has) != 2 {
		t.Errorf("HasChunks = %v, want a's ordinal 0 and the foreign id (linked chunks only)", has)
	}

	storetest.CheckCount(t, s, prefix)

	if err := s.DeleteDocuments(ctx, []string{prefix + "unknown", a}); err != nil {
		t.Fatal(err)
	}
	h, err = s.Holdings(ctx, []string{a, prefix + "unknown", b})
	if err != nil {
		t.Fatal(err)
	}
	if h[a].Present || len(h[a].Chunks) != 0 || len(h[prefix+"unknown"].Chunks) != 0 || !h[b].Present {
		t.Errorf("after DeleteDocuments: %s; %s; want a and unknown gone, b kept", describe(a), describe(prefix+"unknown"))
	}
}

func sortedStrings(s ...string) []string {
	slices.Sort(s)
	return s
}

// TestScanKeysPrefix scans a prefix whose neighbours in key order hold
// documents too, with keys of odd characters, at every page size: each key
// of the prefix comes once from each scan, and nothing outside it.
func TestScanKeysPrefix(t *testing.T) {
	s, base := openTest(t)
	ctx := context.Background()
	prefix := base + "p/"
	inside := []string{prefix + "a", prefix + "a b", prefix + "é", prefix + "😀", prefix + "\uffff", prefix + "\x00", prefix + "'\"\\"}
	outside := []string{base + "p", base + "p.", base + "p0", base + "o", base + "q/a"}
	w := &project.Write{}
	for _, k := range append(slices.Clone(inside), outside...) {
		w.Live = append(w.Live, storetest.Doc(k, 1, "x"))
	}
	if err := s.Apply(ctx, w); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, k := range inside {
		want[k] = 2
	}
	for size := 1; size <= len(inside)+1; size++ {
		got := map[string]int{}
		err := s.ScanKeys(ctx, prefix, size, func(keys []string) error {
			if len(keys) > size {
				t.Errorf("page size %d: a page of %d keys", size, len(keys))
			}
			for _, k := range keys {
				got[k]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("page size %d: ScanKeys keys = %v, want %v (each key of the prefix from both scans)", size, got, want)
		}
	}
}

// TestScanQueriesSeekFromCursor asks Neo4j for the plans of the scans: each
// must seek its index from the cursor. A seek by the prefix would read every
// key before the cursor again on each page, which makes a scan quadratic.
func TestScanQueriesSeekFromCursor(t *testing.T) {
	s, prefix := openTest(t)
	for _, q := range scanQueries {
		res, err := neo4j.ExecuteQuery(context.Background(), s.driver, "EXPLAIN "+q, map[string]any{"after": prefix + "a", "prefix": prefix, "limit": 10},
			neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		var seeks []string
		var walk func(p neo4j.Plan)
		walk = func(p neo4j.Plan) {
			if strings.Contains(p.Operator(), "IndexSeekByRange") {
				seeks = append(seeks, fmt.Sprint(p.Arguments()["Details"]))
			}
			for _, c := range p.Children() {
				walk(c)
			}
		}
		walk(res.Summary.Plan())
		if len(seeks) != 1 || !strings.Contains(seeks[0], "> $after") {
			t.Errorf("plan of %s: range seeks %q, want one that starts at $after", q, seeks)
		}
	}
}
