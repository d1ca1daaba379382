package project

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/fakeclock"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/keys"
)

// memGenerations is a Generations whose Refresh moves to the set next.
type memGenerations struct {
	mu        sync.Mutex
	epoch     int64
	beside    []Generation
	next      func() (int64, []Generation)
	refreshes int
	// err, when set, is what every Refresh returns.
	err error
}

func (m *memGenerations) Current() (int64, []Generation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, m.beside
}

func (m *memGenerations) Refresh(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshes++
	if m.err != nil {
		return m.err
	}
	if m.next != nil {
		m.epoch, m.beside = m.next()
	}
	return nil
}

// vectorIndex is a memIndex that also keeps the vectors it was given, by
// chunk id, and can lose the documents of its next writes.
type vectorIndex struct {
	memIndex
	mu      sync.Mutex
	vectors map[uuid.UUID][]float32
	// lose is how many of the next writes it drops without a word.
	lose int
}

func newVectorIndex(name string) *vectorIndex {
	return &vectorIndex{memIndex: memIndex{newMemStore(name)}, vectors: map[uuid.UUID][]float32{}}
}

func (v *vectorIndex) Apply(ctx context.Context, w *Write) error {
	v.mu.Lock()
	if v.lose > 0 {
		v.lose--
		v.mu.Unlock()
		return nil
	}
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			v.vectors[c.ID] = c.Vector
		}
	}
	v.mu.Unlock()
	return v.memIndex.Apply(ctx, w)
}

// pairEmbedder gives every text the vector {0, 1}: another model, of
// another dimension, than constEmbedder's.
type pairEmbedder struct{}

func (pairEmbedder) Dim() int { return 2 }

func (pairEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{0, 1}
	}
	return out, nil
}

// epochRelational refuses a write of another epoch than its own, as the
// relational store does.
type epochRelational struct {
	memRelational
	mu    *sync.Mutex
	epoch *int64
}

func (e epochRelational) Apply(ctx context.Context, w *Write, l []LedgerEntry) error {
	e.mu.Lock()
	now := *e.epoch
	e.mu.Unlock()
	if w.Epoch != now {
		return &GenerationsChangedError{Wrote: w.Epoch, Now: now}
	}
	return e.memRelational.Apply(ctx, w, l)
}

func besideGeneration(f *fixture, number int, idx *vectorIndex) Generation {
	return Generation{Number: number, Index: idx, Embedder: pairEmbedder{}, Fences: f.p.d.Fences.(*fence.Checker).Of(idx)}
}

// requireSameChunks fails unless idx holds exactly the relational store's
// chunks, each with the vector {0, 1} of its own embedder.
func requireSameChunks(t *testing.T, f *fixture, idx *vectorIndex) {
	t.Helper()
	f.rel.mu.Lock()
	defer f.rel.mu.Unlock()
	idx.mu.Lock()
	defer idx.mu.Unlock()
	for key, want := range f.rel.chunks {
		got := idx.chunks[key]
		if !slices.Equal(got, want) {
			t.Errorf("generation beside the live one holds %v of %s, want the relational store's %v", got, key, want)
		}
		for _, id := range got {
			if v := idx.vectors[id]; !slices.Equal(v, []float32{0, 1}) {
				t.Errorf("chunk %s of %s has the vector %v in the generation beside, want its embedder's [0 1]", id, key, v)
			}
		}
	}
	for key, got := range idx.chunks {
		if _, ok := f.rel.chunks[key]; !ok && len(got) > 0 {
			t.Errorf("generation beside the live one holds %v of %s, which the relational store does not hold", got, key)
		}
	}
}

func TestGenerationBesideGetsEveryWrite(t *testing.T) {
	f := newFixture(t, Config{})
	g2 := newVectorIndex(StoreIndex)
	f.p.d.Generations = &memGenerations{epoch: 1, beside: []Generation{besideGeneration(f, 2, g2)}}
	batches := [][]*kgo.Record{
		{rec(0, "a", upsert("a", 1)), rec(1, "b", upsert("b", 1)), rec(2, "c", upsert("c", 1))},
		{rec(3, "a", upsert("a", 2)), rec(4, "b", `{"document_key":"b","version":2,"op":"withdraw"}`), {Topic: "documents", Offset: 5, Key: []byte("c")}},
	}
	for _, batch := range batches {
		if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, batch); err != nil {
			t.Fatal(err)
		}
	}
	requireSameChunks(t, f, g2)
	if got := f.rel.chunks["a"]; !slices.Equal(got, keys.ChunkIDs("a", 2, 2)) {
		t.Fatalf("relational store holds %v of a, want version 2's chunks", got)
	}
	if got := f.index.chunks["a"]; !slices.Equal(got, keys.ChunkIDs("a", 2, 2)) {
		t.Fatalf("live index holds %v of a, want version 2's chunks", got)
	}
}

func TestGenerationStartedUnderAWrite(t *testing.T) {
	var (
		mu    sync.Mutex
		epoch int64 = 2 // a generation was started since the member read the set
	)
	f := newFixtureWith(t, Config{}, func(m *memStore) Relational {
		return epochRelational{memRelational: memRelational{m}, mu: &mu, epoch: &epoch}
	})
	g2 := newVectorIndex(StoreIndex)
	gens := &memGenerations{epoch: 1, next: func() (int64, []Generation) { return 2, []Generation{besideGeneration(f, 2, g2)} }}
	f.p.d.Generations = gens
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatal(err)
	}
	if gens.refreshes != 1 {
		t.Errorf("the set was read again %d times, want once", gens.refreshes)
	}
	if f.rel.writes != 1 {
		t.Errorf("relational writes = %d, want 1: the refused one is not written", f.rel.writes)
	}
	if f.index.writes != 2 {
		t.Errorf("live index writes = %d, want 2: the batch is written again from the index step", f.index.writes)
	}
	requireSameChunks(t, f, g2)
	if len(g2.chunks["a"]) != 2 {
		t.Fatalf("the generation started under the write holds %v of a, want its 2 chunks", g2.chunks["a"])
	}
}

func TestGenerationBesideFenced(t *testing.T) {
	f := newFixture(t, Config{FenceRetries: 1})
	g2 := newVectorIndex(StoreIndex)
	g2.lose = 1 // its first write is lost: the fence finds it, the re-projection writes it
	f.p.d.Generations = &memGenerations{epoch: 1, beside: []Generation{besideGeneration(f, 2, g2)}}
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatal(err)
	}
	requireSameChunks(t, f, g2)
	if got := f.letters.reasons(); len(got) != 0 {
		t.Errorf("dead letters %v, want none: the re-projection repairs the generation", got)
	}
	if f.index.writes != 2 {
		t.Errorf("live index writes = %d, want 2 (the write and the re-projection)", f.index.writes)
	}
}

func TestSettleGenerationBeside(t *testing.T) {
	f := newFixture(t, Config{})
	clock := fakeclock.New()
	f.p.d.Clock = clock
	g2 := newVectorIndex(StoreIndex)
	f.p.d.Generations = &memGenerations{epoch: 1, beside: []Generation{besideGeneration(f, 2, g2)}}
	owner := Fence{Topic: "documents", Token: 2, LateUntil: clock.Now().Add(time.Minute)}
	if err := f.p.Handle(context.Background(), owner, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 2))}); err != nil {
		t.Fatal(err)
	}
	// A late write of the earlier owner in the generation beside: version
	// 1's points of a.
	g2.memStore.mu.Lock()
	g2.chunks["a"] = append(g2.chunks["a"], keys.ChunkIDs("a", 1, 3)...)
	g2.memStore.mu.Unlock()
	clock.Advance(time.Minute)
	if err := f.p.Settle(context.Background(), owner); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	requireSameChunks(t, f, g2)
}

// TestGenerationDroppedUnderAWrite: a generation aborted while a member
// still writes it (its collection deleted: every write of it fails) is
// left out once the member reads the set again.
func TestGenerationDroppedUnderAWrite(t *testing.T) {
	f := newFixture(t, Config{})
	g2 := newVectorIndex(StoreIndex)
	g2.fail = func(*Write) error {
		return &StoreError{Store: StoreIndex, Kind: Fatal, Err: errors.New("collection chunks_g2 not found")}
	}
	gens := &memGenerations{epoch: 1, beside: []Generation{besideGeneration(f, 2, g2)}, next: func() (int64, []Generation) { return 2, nil }}
	f.p.d.Generations = gens
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.p.Handle(ctx, Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatal(err)
	}
	if len(f.rel.chunks["a"]) != 2 || len(f.index.chunks["a"]) != 2 {
		t.Fatalf("relational %v, live index %v of a: want both written without the dropped generation", f.rel.chunks["a"], f.index.chunks["a"])
	}
}

// staleRelational is a memRelational whose chunk rows hold the vectors of
// generation 1, another model than the projector's: rows written before
// a switch.
type staleRelational struct{ memRelational }

func (s staleRelational) Reprojection(ctx context.Context, keys []string) (*Write, map[string][]int, error) {
	w, incomplete, err := s.memRelational.Reprojection(ctx, keys)
	for i := range w.Live {
		for j := range w.Live[i].Chunks {
			w.Live[i].Chunks[j].Vector, w.Live[i].Chunks[j].Generation = []float32{9, 9}, 1
		}
	}
	return w, incomplete, err
}

// TestSettleEmbedsRowsOfAnotherGeneration: a member whose live generation
// is 2 settles documents whose relational rows hold generation 1's
// vectors (written before the switch): it writes its own model's, never
// the rows' (another model, here another dimension).
func TestSettleEmbedsRowsOfAnotherGeneration(t *testing.T) {
	f := newFixture(t, Config{Generation: 2})
	clock := fakeclock.New()
	f.p.d.Clock = clock
	live := &vectorIndex{memIndex: memIndex{f.index}, vectors: map[uuid.UUID][]float32{}}
	f.p.d.Index = live
	f.p.d.Settlement = staleRelational{memRelational{f.rel}}
	owner := Fence{Topic: "documents", Token: 2, LateUntil: clock.Now().Add(time.Minute)}
	if err := f.p.Handle(context.Background(), owner, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 2))}); err != nil {
		t.Fatal(err)
	}
	// A late removal of an earlier owner: the settle must restore a.
	f.index.mu.Lock()
	delete(f.index.chunks, "a")
	f.index.mu.Unlock()
	clock.Advance(time.Minute)
	if err := f.p.Settle(context.Background(), owner); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	ids := keys.ChunkIDs("a", 2, 2)
	if got := f.index.chunks["a"]; !slices.Equal(got, ids) {
		t.Fatalf("live index holds %v of a after the settle, want %v", got, ids)
	}
	for _, id := range ids {
		if v := live.vectors[id]; !slices.Equal(v, []float32{1, 0, 0, 0}) {
			t.Errorf("chunk %s settled with the vector %v, want generation 2's embedder's [1 0 0 0], not the row's of generation 1", id, v)
		}
	}
}

func TestReembedOnlyOtherGenerations(t *testing.T) {
	own := Chunk{Text: "a", Vector: []float32{1, 0}, Generation: 2}
	other := Chunk{Text: "b", Vector: []float32{9, 9, 9}, Generation: 1}
	w := &Write{Live: []Document{{Key: "d", Chunks: []Chunk{own}}}}
	got, err := Reembed(context.Background(), pairEmbedder{}, 2, w)
	if err != nil || got != w {
		t.Fatalf("Reembed of a write of generation 2's vectors = %p, %v; want the write itself %p", got, err, w)
	}
	w = &Write{Live: []Document{{Key: "d", Chunks: []Chunk{own, other}}}}
	got, err = Reembed(context.Background(), pairEmbedder{}, 2, w)
	if err != nil {
		t.Fatal(err)
	}
	cs := got.Live[0].Chunks
	if !slices.Equal(cs[0].Vector, []float32{1, 0}) || !slices.Equal(cs[1].Vector, []float32{0, 1}) || cs[1].Generation != 2 {
		t.Errorf("Reembed = %v (generation %d), want the own vector kept and the other generation's embedded again: [1 0], [0 1] of generation 2",
			[][]float32{cs[0].Vector, cs[1].Vector}, cs[1].Generation)
	}
	if !slices.Equal(w.Live[0].Chunks[1].Vector, []float32{9, 9, 9}) {
		t.Errorf("Reembed changed its argument's vector to %v", w.Live[0].Chunks[1].Vector)
	}
}

// TestRetiredPrimaryHalts: a member whose live generation was retired,
// and its collection deleted, before it wrote again stops with the
// registry's word to restart it, instead of retrying a write that cannot
// succeed for ever.
func TestRetiredPrimaryHalts(t *testing.T) {
	f := newFixture(t, Config{})
	f.index.fail = func(*Write) error {
		return &StoreError{Store: StoreIndex, Kind: Fatal, Err: errors.New("collection chunks_g1 not found")}
	}
	retired := &PermanentError{Err: errors.New("index generation 1, which this member writes as its live one, is retired: restart the member")}
	f.p.d.Generations = &memGenerations{epoch: 1, err: retired}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := f.p.Handle(ctx, Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
	if !errors.Is(err, retired) || ctx.Err() != nil {
		t.Fatalf("Handle with a retired live generation = %v (ctx %v), want the registry's PermanentError at once", err, ctx.Err())
	}
	if len(f.rel.chunks["a"]) != 0 {
		t.Errorf("relational store holds %v of a, want nothing written after the index failed", f.rel.chunks["a"])
	}
}

// TestRetiredPrimaryHaltsTheSettle: the settle of a member whose live
// generation was retired, and its collection deleted, stops with the
// registry's word too, instead of retrying its write for ever.
func TestRetiredPrimaryHaltsTheSettle(t *testing.T) {
	f := newFixture(t, Config{})
	clock := fakeclock.New()
	f.p.d.Clock = clock
	owner := Fence{Topic: "documents", Token: 2, LateUntil: clock.Now().Add(time.Minute)}
	if err := f.p.Handle(context.Background(), owner, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 2))}); err != nil {
		t.Fatal(err)
	}
	f.index.mu.Lock()
	delete(f.index.chunks, "a") // the settle has a to restore
	f.index.mu.Unlock()
	f.index.fail = func(*Write) error {
		return &StoreError{Store: StoreIndex, Kind: Fatal, Err: errors.New("collection chunks_g1 not found")}
	}
	retired := &PermanentError{Err: errors.New("index generation 1 is retired: restart the member")}
	f.p.d.Generations = &memGenerations{epoch: 1, err: retired}
	clock.Advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.p.Settle(ctx, owner); !errors.Is(err, retired) || ctx.Err() != nil {
		t.Fatalf("Settle with a retired live generation = %v (ctx %v), want the registry's PermanentError at once", err, ctx.Err())
	}
}
