package qdrantcheck

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/storetest"
)

// TestExactQueryRanksAsExhaustiveCosine projects a corpus through the
// index adapter, into a collection of two shards, and requires an exact
// query, as a reader of the index sends it, to return the ids and order an
// exhaustive cosine ranking of the stored points computes.
func TestExactQueryRanksAsExhaustiveCosine(t *testing.T) {
	addr := freshServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("ranking_%d", time.Now().UnixNano())
	store, err := index.Open(index.Config{Addr: addr, Collection: name, Dim: storetest.Dim, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var docs []project.Document
	for d := range 120 {
		texts := make([]string, 1+d%7)
		for i := range texts {
			texts[i] = fmt.Sprintf("document %d, chunk %d: %s", d, i, strings.Repeat("word ", d%5+i))
		}
		docs = append(docs, storetest.Doc(fmt.Sprintf("doc-%03d", d), 1, texts...))
	}
	if err := store.Apply(ctx, &project.Write{Live: docs}); err != nil {
		t.Fatal(err)
	}

	c, err := qdrant.NewClient(&qdrant.Config{Host: strings.Split(addr, ":")[0], Port: port(t, addr), SkipCompatibilityCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer func() { _ = c.DeleteCollection(context.Background(), name) }()
	stored, err := c.Scroll(ctx, &qdrant.ScrollPoints{
		CollectionName: name, Limit: qdrant.PtrOf(uint32(10000)), WithVectors: qdrant.NewWithVectors(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var chunks int
	for _, d := range docs {
		chunks += len(d.Chunks)
	}
	if len(stored) != chunks {
		t.Fatalf("the index holds %d points, want the corpus's %d chunks", len(stored), chunks)
	}

	vecs, err := embed.NewHashing(storetest.Dim).Embed(ctx, []string{"a reader's question about chunk 3 of a document"})
	if err != nil {
		t.Fatal(err)
	}
	q := vecs[0]
	type ranked struct {
		id    string
		score float64
	}
	want := make([]ranked, 0, len(stored))
	for _, p := range stored {
		want = append(want, ranked{p.GetId().GetUuid(), cosine(q, p.GetVectors().GetVector().GetDense().GetData())})
	}
	slices.SortFunc(want, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.id, b.id)) })

	const limit = 25
	got, err := c.Query(ctx, &qdrant.QueryPoints{
		CollectionName: name, Query: qdrant.NewQueryDense(q), Limit: qdrant.PtrOf(uint64(limit)),
		Params: &qdrant.SearchParams{Exact: qdrant.PtrOf(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != limit {
		t.Fatalf("the query answered %d points, want %d", len(got), limit)
	}
	for i, p := range got {
		w := want[i]
		// Two points whose cosines differ in the last float32 bits may
		// come in either order.
		if p.GetId().GetUuid() != w.id && math.Abs(float64(p.GetScore())-w.score) > 1e-6 {
			t.Errorf("rank %d: got %s (score %v), want %s (cosine %v)", i+1, p.GetId().GetUuid(), p.GetScore(), w.id, w.score)
		}
		if math.Abs(float64(p.GetScore())-w.score) > 1e-5 {
			t.Errorf("rank %d: score %v, want the cosine %v", i+1, p.GetScore(), w.score)
		}
	}
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / (math.Sqrt(na) * math.Sqrt(nb))
}

func port(t *testing.T, addr string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &p); err != nil {
		t.Fatalf("address %s: %v", addr, err)
	}
	return p
}
