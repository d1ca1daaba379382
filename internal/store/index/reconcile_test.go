package index

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

func TestReconcileReads(t *testing.T) {
	s := openTest(t, storetest.Dim)
	ctx := context.Background()
	w := &project.Write{Live: []project.Document{storetest.Doc("a", 2, "x", "y"), storetest.Doc("b", 1, "z"), storetest.Doc("other", 1, "o")}}
	if err := s.Apply(ctx, w); err != nil {
		t.Fatal(err)
	}
	// A foreign point: a's key in its payload, an id the projector never wrote.
	foreign := uuid.MustParse("00000000-0000-4000-8000-000000000001")
	payload, _ := qdrant.TryValueMap(map[string]any{"document_key": "a", "version": int64(7)})
	_, err := s.client.Upsert(ctx, &qdrant.UpsertPoints{CollectionName: s.cfg.Collection, Wait: qdrant.PtrOf(true), Points: []*qdrant.PointStruct{
		{Id: qdrant.NewIDUUID(foreign.String()), Vectors: qdrant.NewVectorsDense(make([]float32, storetest.Dim)), Payload: payload},
	}})
	if err != nil {
		t.Fatal(err)
	}

	h, err := s.Holdings(ctx, []string{"a", "b", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for k, hold := range h {
		for _, c := range hold.Chunks {
			got[k] = append(got[k], fmt.Sprintf("%s@%d", c.ID, c.Version))
		}
		slices.Sort(got[k])
	}
	want := map[string][]string{
		"a": sortedStrings(keys.ChunkID("a", 2, 0).String()+"@2", keys.ChunkID("a", 2, 1).String()+"@2", foreign.String()+"@7"),
		"b": {keys.ChunkID("b", 1, 0).String() + "@1"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Holdings = %v, want %v", got, want)
	}

	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "b", "other"}},
		{"o", []string{"other"}},
		{"none", nil},
	}
	for _, tt := range tests {
		var pages [][]string
		err := s.ScanKeys(ctx, tt.prefix, 2, func(keys []string) error {
			if len(keys) > 2 {
				t.Errorf("page of %d keys, want at most 2", len(keys))
			}
			pages = append(pages, slices.Clone(keys))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for _, p := range pages {
			for _, k := range p {
				if !slices.Contains(all, k) {
					all = append(all, k)
				}
			}
		}
		slices.Sort(all)
		if fmt.Sprint(all) != fmt.Sprint(tt.want) {
			t.Errorf("ScanKeys(%q) keys = %v, want %v", tt.prefix, all, tt.want)
		}
	}

	has, err := s.HasChunks(ctx, []uuid.UUID{keys.ChunkID("b", 1, 0), keys.ChunkID("b", 1, 1), foreign})
	if err != nil {
		t.Fatal(err)
	}
	if !has[keys.ChunkID("b", 1, 0)] || has[keys.ChunkID("b", 1, 1)] || !has[foreign] || len(has) != 2 {
		t.Errorf("HasChunks = %v, want b's ordinal 0 and the foreign id only", has)
	}

	// The test's collection is its own, so the empty prefix is all of it.
	storetest.CheckCount(t, s, "")
	if _, ok, err := s.Count(ctx, "o"); ok || err != nil {
		t.Errorf("Count(\"o\") ok = %v, %v; want false: Qdrant cannot count by a prefix", ok, err)
	}

	if err := s.DeleteDocuments(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	h, err = s.Holdings(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(h["a"].Chunks) != 0 || len(h["b"].Chunks) != 1 {
		t.Errorf("after DeleteDocuments(a): a holds %d, b holds %d; want 0 and 1", len(h["a"].Chunks), len(h["b"].Chunks))
	}
}

func sortedStrings(s ...string) []string {
	slices.Sort(s)
	return s
}
