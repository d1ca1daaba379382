package project

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/fakeclock"
	"github.com/projector/projector/internal/keys"
)

// slowIndex is an index whose writes hang, while hang is set, until their
// context ends: a request on its way that does not come back.
type slowIndex struct {
	memIndex
	mu      sync.Mutex
	hang    bool
	started chan struct{}
}

func (s *slowIndex) Apply(ctx context.Context, w *Write) error {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang {
		s.started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	return s.memIndex.Apply(ctx, w)
}

// TestIndexWriteBoundedByItsTokenCheck: an index write that does not end
// within IndexWriteTimeout of its token check is given up, and tried again
// only after a new check; when the partition has a newer writer by then,
// the writer stops, refused for the index, without another index write.
// So a member cut off from everything but the index writes it for at most
// the bound after the new owner took its token.
func TestIndexWriteBoundedByItsTokenCheck(t *testing.T) {
	f := newFixture(t, Config{IndexWriteTimeout: 10 * time.Second})
	f.rel.fenced = true
	clock := fakeclock.New()
	f.p.d.Clock = clock
	idx := &slowIndex{memIndex: memIndex{f.index}, hang: true, started: make(chan struct{})}
	f.p.d.Index = idx
	done := make(chan error, 1)
	go func() {
		done <- f.p.Handle(context.Background(), Fence{Topic: "documents", Token: 1}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
	}()
	<-idx.started
	// The new owner takes its token while the write hangs; then the bound
	// passes.
	f.rel.mu.Lock()
	f.rel.newest = 2
	f.rel.mu.Unlock()
	clock.Advance(10 * time.Second)
	err := <-done
	var halt *HaltError
	if !errors.As(err, &halt) || halt.Reason != HaltFenced {
		t.Fatalf("Handle = %v, want a halt for reason fenced", err)
	}
	if fenced, ok := errors.AsType[*FencedError](err); !ok || fenced.Store != StoreIndex {
		t.Errorf("refused by %v, want the index's write refused (its token check)", err)
	}
	if f.index.writes != 0 || f.graph.writes != 0 || f.rel.writes != 0 {
		t.Errorf("writes: index %d, graph %d, relational %d; want none", f.index.writes, f.graph.writes, f.rel.writes)
	}
	if got := testutil.ToFloat64(f.p.m.fenced.WithLabelValues(StoreIndex)); got != 1 {
		t.Errorf("projector_fenced_writes_total{store=index} = %v, want 1", got)
	}
}

// TestReprojectionReplacesALaterLeftover: the index holds a later version
// of a document that no relational write ever committed (a member that
// died, or lost its partition, after its index write). The owner's write
// of the current version only moves forward, so it keeps them and its
// fence finds them; the re-projection writes the index exactly and the
// record is projected, not dead-lettered.
func TestReprojectionReplacesALaterLeftover(t *testing.T) {
	f := newFixture(t, Config{FenceRetries: 2})
	f.index.chunks["a"] = keys.ChunkIDs("a", 3, 1)
	f.index.states["a"] = State{Version: 3}
	if err := f.p.Handle(context.Background(), Fence{Topic: "documents", Token: 1}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 2))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got := f.letters.reasons(); len(got) != 0 {
		t.Errorf("dead letters = %v, want none", got)
	}
	for _, s := range []*memStore{f.index, f.graph, f.rel} {
		if got := s.chunks["a"]; len(got) != 2 || got[0] != keys.ChunkID("a", 2, 0) {
			t.Errorf("%s holds %v, want the two chunks of version 2", s.name, got)
		}
	}
}

// TestSettle: a write made in the late window records its documents; the
// settle makes the index hold exactly what the relational store holds of
// them (removing the points of a late write, restoring what it took away),
// counts what it changed, and forgets them; a settle that finds its token
// no longer the newest writes nothing.
func TestSettle(t *testing.T) {
	f := newFixture(t, Config{})
	clock := fakeclock.New()
	f.p.d.Clock = clock
	owner := Fence{Topic: "documents", Token: 2, LateUntil: clock.Now().Add(time.Minute)}
	batch := []*kgo.Record{rec(0, "a", upsert("a", 2)), rec(1, "b", upsert("b", 1))}
	if err := f.p.Handle(context.Background(), owner, TopicID{}, batch); err != nil {
		t.Fatal(err)
	}
	if len(f.rel.unsettled) != 2 {
		t.Fatalf("documents recorded for the settle = %v, want a and b", f.rel.unsettled)
	}
	// A late write of the earlier owner: version 1 of a, whose ids are
	// other than version 2's, and b's points gone.
	f.index.mu.Lock()
	f.index.chunks["a"] = append(f.index.chunks["a"], keys.ChunkIDs("a", 1, 3)...)
	delete(f.index.chunks, "b")
	f.index.mu.Unlock()

	clock.Advance(time.Minute)
	if err := f.p.Settle(context.Background(), owner); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	for _, key := range []string{"a", "b"} {
		if got, want := f.index.chunks[key], f.rel.chunks[key]; len(got) != len(want) {
			t.Errorf("index holds %v of %s after the settle, want the relational store's %v", got, key, want)
		}
	}
	if len(f.rel.unsettled) != 0 {
		t.Errorf("still recorded after the settle: %v", f.rel.unsettled)
	}
	if got := testutil.ToFloat64(f.p.m.settled.WithLabelValues(settleRemoved)); got != 3 {
		t.Errorf("projector_index_settled_points_total{action=removed} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(f.p.m.settled.WithLabelValues(settleRestored)); got != 2 {
		t.Errorf("projector_index_settled_points_total{action=restored} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.p.m.settles.WithLabelValues(settleChanged)); got != 1 {
		t.Errorf("projector_index_settles_total{result=changed} = %v, want 1", got)
	}

	// Outside the window nothing is recorded; a settle then is clean.
	if err := f.p.Handle(context.Background(), owner, TopicID{}, []*kgo.Record{rec(2, "c", upsert("c", 1))}); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Settle(context.Background(), owner); err != nil || len(f.rel.unsettled) != 0 {
		t.Fatalf("Settle = %v with %v recorded, want a clean settle of nothing", err, f.rel.unsettled)
	}
	if got := testutil.ToFloat64(f.p.m.settles.WithLabelValues(settleClean)); got != 1 {
		t.Errorf("projector_index_settles_total{result=clean} = %v, want 1", got)
	}

	// A settle of a member that lost the partition writes nothing.
	f.rel.fenced, f.rel.newest = true, 3
	f.rel.unsettled["a"] = true
	f.index.chunks["a"] = nil
	writes := f.index.writes
	var fenced *FencedError
	if err := f.p.Settle(context.Background(), owner); !errors.As(err, &fenced) {
		t.Fatalf("Settle under an older token = %v, want a FencedError", err)
	}
	if f.index.writes != writes {
		t.Errorf("the fenced settle wrote the index %d times, want none", f.index.writes-writes)
	}
}

// advanceAt moves a fake clock on at a fault point, once: the writer was
// stopped there (frozen, descheduled) for that long.
type advanceAt struct {
	point string
	clock *fakeclock.Clock
	by    time.Duration
	once  *sync.Once
	then  func()
}

func (a advanceAt) At(_ context.Context, point string) {
	if point == a.point {
		a.once.Do(func() {
			a.clock.Advance(a.by)
			a.then()
		})
	}
}

// TestIndexWriteBoundStartsBeforeItsCheck: a writer stopped between the
// token check of its index write and the write itself for longer than the
// bound does not write once it runs again: the bound was running since
// before the check. The interleaving explorer found the write landing
// after the new owner's settle when the bound started after the check.
func TestIndexWriteBoundStartsBeforeItsCheck(t *testing.T) {
	f := newFixture(t, Config{IndexWriteTimeout: 10 * time.Second})
	f.rel.fenced = true
	clock := fakeclock.New()
	f.p.d.Clock = clock
	f.p.d.Faults = advanceAt{point: "index-checked", clock: clock, by: 10 * time.Second, once: &sync.Once{}, then: func() {
		f.rel.mu.Lock()
		f.rel.newest = 2 // the new owner took its token meanwhile
		f.rel.mu.Unlock()
	}}
	err := f.p.Handle(context.Background(), Fence{Topic: "documents", Token: 1}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
	var halt *HaltError
	if !errors.As(err, &halt) || halt.Reason != HaltFenced {
		t.Fatalf("Handle = %v, want a halt for reason fenced", err)
	}
	if f.index.writes != 0 {
		t.Errorf("index writes = %d after the bound ran out between the check and the write, want none", f.index.writes)
	}
}

// TestStoreCallTimeout: a store call that does not end (a connection that
// passes no byte) is given up after StoreCallTimeout and tried again, and
// the batch is projected once the store answers; before, the partition
// waited for it until revoked.
func TestStoreCallTimeout(t *testing.T) {
	f := newFixture(t, Config{StoreCallTimeout: 50 * time.Millisecond})
	g := &hangingGraph{memIndex: memIndex{f.graph}, hangs: 1}
	f.p.d.Graph = g
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got := len(f.graph.chunks["a"]); got != 2 {
		t.Errorf("the graph holds %d chunks of a after the hung call, want 2", got)
	}
	if got := testutil.ToFloat64(f.p.m.storeErrors.WithLabelValues(StoreGraph, Transient.String())); got != 1 {
		t.Errorf("transient graph errors = %v, want the one hung call", got)
	}
}

// hangingGraph's first hangs calls hang until their context ends.
type hangingGraph struct {
	memIndex
	hangs int
}

func (g *hangingGraph) Apply(ctx context.Context, w *Write) error {
	if g.hangs > 0 {
		g.hangs--
		<-ctx.Done()
		return ctx.Err()
	}
	return g.memIndex.Apply(ctx, w)
}
