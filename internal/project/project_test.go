package project

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/health"
)

// memStore is an in-memory store with failures on demand; it plays the
// index, the graph and the relational store in these unit tests.
type memStore struct {
	name string
	mu   sync.Mutex
	// chunks maps document key -> chunk ids held.
	chunks map[string][]uuid.UUID
	states map[string]State
	ledger map[string]LedgerEntry
	// fail returns the error for the next Apply, if any.
	fail func(w *Write) error
	// drop makes Apply silently skip documents whose key contains it.
	drop   string
	writes int
	// fenced makes the store check writers' fences as the graph and the
	// relational store do; newest is the newest token it has seen.
	fenced bool
	newest int64
	// unsettled holds the documents recorded for the settle.
	unsettled map[string]bool
}

func newMemStore(name string) *memStore {
	return &memStore{name: name, chunks: map[string][]uuid.UUID{}, states: map[string]State{}, ledger: map[string]LedgerEntry{},
		unsettled: map[string]bool{}}
}

func (m *memStore) Name() string { return m.name }

func (m *memStore) apply(w *Write, ledger []LedgerEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail(w); err != nil {
			return err
		}
	}
	if err := m.checkFence(w.Fence); err != nil {
		return err
	}
	m.writes++
	for _, d := range w.Live {
		if m.drop != "" && strings.Contains(d.Key, m.drop) {
			continue
		}
		if st, ok := m.states[d.Key]; ok && st.Version > d.Version && !w.Exact {
			// Writes only move a document forward, as in every store,
			// unless the index is written exactly.
			continue
		}
		var ids []uuid.UUID
		for _, c := range d.Chunks {
			ids = append(ids, c.ID)
		}
		m.chunks[d.Key] = ids
		m.states[d.Key] = State{Version: d.Version, ContentHash: d.ContentHash, Position: d.Position}
	}
	for _, d := range w.Withdrawn {
		delete(m.chunks, d.Key)
		m.states[d.Key] = State{Version: d.Version, Withdrawn: true, Position: d.Position}
	}
	for _, l := range ledger {
		m.ledger[l.IdempotencyKey] = l
	}
	if w.Settle {
		for _, k := range w.Keys() {
			m.unsettled[k] = true
		}
	}
	return nil
}

// checkFence refuses a fence older than the newest seen, and records it.
func (m *memStore) checkFence(f Fence) error {
	if !m.fenced || f.Token == 0 {
		return nil
	}
	if m.newest > f.Token {
		return &FencedError{Store: m.name, Fence: f, Newest: m.newest}
	}
	m.newest = f.Token
	return nil
}

func (m *memStore) States(_ context.Context, f Fence, keys []string) (map[string]State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced && f.Token > 0 && m.newest > f.Token {
		return nil, &FencedError{Store: m.name, Fence: f, Newest: m.newest}
	}
	out := map[string]State{}
	for _, k := range keys {
		if s, ok := m.states[k]; ok {
			out[k] = s
		}
	}
	return out, nil
}

func (m *memStore) ChunkCounts(_ context.Context, keys []string) (map[string]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, k := range keys {
		out[k] = len(m.chunks[k])
	}
	return out, nil
}

func (m *memStore) ChunkIDs(_ context.Context, keys []string) (map[string][]uuid.UUID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]uuid.UUID{}
	for _, k := range keys {
		out[k] = append([]uuid.UUID(nil), m.chunks[k]...)
	}
	return out, nil
}

type memIndex struct{ *memStore }

// Apply writes w unless ctx has ended, as a store's client refuses to.
func (m memIndex) Apply(ctx context.Context, w *Write) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.apply(w, nil)
}

// Points returns the points of keys, each of the event its document's
// state holds.
func (m memIndex) Points(_ context.Context, keys []string) (map[string][]Point, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]Point{}
	for _, k := range keys {
		for _, id := range m.chunks[k] {
			st := m.states[k]
			out[k] = append(out[k], Point{ID: id, Version: st.Version, Position: st.Position})
		}
	}
	return out, nil
}

type memRelational struct{ *memStore }

func (m memRelational) CheckFence(_ context.Context, f Fence) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced && f.Token > 0 && m.newest > f.Token {
		return &FencedError{Store: m.name, Fence: f, Newest: m.newest}
	}
	return nil
}

func (m memRelational) Unsettled(ctx context.Context, f Fence, after string, limit int) ([]string, error) {
	if err := m.CheckFence(ctx, f); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.unsettled {
		if k > after {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out[:min(limit, len(out))], nil
}

// Reprojection rebuilds the documents from their state and chunk ids.
func (m memRelational) Reprojection(_ context.Context, keys []string) (*Write, map[string][]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &Write{}
	for _, k := range keys {
		st, ok := m.states[k]
		switch {
		case !ok:
		case st.Withdrawn:
			w.Withdrawn = append(w.Withdrawn, Withdrawal{Key: k, Version: st.Version, Position: st.Position})
		default:
			d := Document{Key: k, Version: st.Version, Position: st.Position, ContentHash: st.ContentHash}
			for i, id := range m.chunks[k] {
				d.Chunks = append(d.Chunks, Chunk{ID: id, DocumentKey: k, Version: st.Version, Ordinal: i})
			}
			w.Live = append(w.Live, d)
		}
	}
	return w, nil, nil
}

func (m memRelational) Settled(ctx context.Context, f Fence, keys []string) error {
	if err := m.CheckFence(ctx, f); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.unsettled, k)
	}
	return nil
}

func (m memRelational) Apply(ctx context.Context, w *Write, l []LedgerEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.apply(w, l)
}

// memLetters records dead letters, or fails with err.
type memLetters struct {
	mu      sync.Mutex
	letters []DeadLetter
	err     error
	sends   int
}

func (m *memLetters) Send(_ context.Context, l []DeadLetter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sends++
	if m.err != nil {
		return m.err
	}
	m.letters = append(m.letters, l...)
	return nil
}

func (m *memLetters) reasons() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, l := range m.letters {
		out = append(out, string(l.Reason)+":"+string(l.Record.Key))
	}
	sort.Strings(out)
	return out
}

// constEmbedder gives every text the same unit vector.
type constEmbedder struct{}

func (constEmbedder) Dim() int { return 4 }

func (constEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0, 0, 0}
	}
	return out, nil
}

type fixture struct {
	p                 *Projector
	index, graph, rel *memStore
	letters           *memLetters
	health            *health.Status
	reg               *prometheus.Registry
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return newFixtureWith(t, cfg, func(m *memStore) Relational { return memRelational{m} })
}

// newFixtureWith is newFixture with the relational store rel makes of the
// fixture's relational memStore.
func newFixtureWith(t *testing.T, cfg Config, rel func(*memStore) Relational) *fixture {
	t.Helper()
	f := &fixture{
		index: newMemStore(StoreIndex), graph: newMemStore(StoreGraph), rel: newMemStore(StoreRelational),
		letters: &memLetters{}, health: health.New(), reg: prometheus.NewRegistry(),
	}
	cfg.RetryMin, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	if cfg.OnConflict == "" {
		cfg.OnConflict = ConflictDLQ
	}
	if cfg.OnFenceMismatch == "" {
		cfg.OnFenceMismatch = FenceDLQ
	}
	f.p = New(cfg, zap.NewNop(), f.reg, Deps{
		Decoder:     event.NewDecoder(event.Limits{MaxRecordBytes: 1 << 16, MaxChunks: 10, VectorDim: 4}, event.Splitter{MaxBytes: 100}),
		Embedder:    constEmbedder{},
		Index:       memIndex{f.index},
		Graph:       memIndex{f.graph},
		Relational:  rel(f.rel),
		Settlement:  memRelational{f.rel},
		Fences:      fence.New(fence.IDs, f.reg, f.index, f.graph, f.rel),
		DeadLetters: f.letters,
		Health:      f.health,
	})
	return f
}

func rec(offset int64, key, value string) *kgo.Record {
	return &kgo.Record{Topic: "documents", Partition: 0, Offset: offset, Key: []byte(key), Value: []byte(value)}
}

func upsert(key string, version int) string {
	return `{"document_key":"` + key + `","version":` + strconv.Itoa(version) + `,"chunks":[{"text":"a"},{"text":"b"}]}`
}

func TestTransientFailureIsRetried(t *testing.T) {
	f := newFixture(t, Config{})
	failures := 3
	f.graph.fail = func(*Write) error {
		if failures > 0 {
			failures--
			return &StoreError{Store: StoreGraph, Kind: Transient, Err: errors.New("connection reset")}
		}
		return nil
	}
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if len(f.rel.chunks["a"]) != 2 || len(f.graph.chunks["a"]) != 2 {
		t.Errorf("chunks: graph %d, relational %d; want 2 and 2", len(f.graph.chunks["a"]), len(f.rel.chunks["a"]))
	}
	if f.index.writes != 1 {
		t.Errorf("index writes = %d, want 1: only the failing store is retried", f.index.writes)
	}
	if got := testutil.ToFloat64(f.p.m.storeErrors.WithLabelValues(StoreGraph, "transient")); got != 3 {
		t.Errorf("graph transient errors = %v, want 3", got)
	}
	if p := f.health.Problems(); len(p) != 0 {
		t.Errorf("problems after recovery = %v, want none", p)
	}
}

func TestRejectedRecordIsIsolated(t *testing.T) {
	f := newFixture(t, Config{})
	f.rel.fail = func(w *Write) error {
		for _, d := range w.Live {
			if d.Key == "poison" {
				return &StoreError{Store: StoreRelational, Kind: Rejected, Err: errors.New("value too long")}
			}
		}
		return nil
	}
	recs := []*kgo.Record{rec(0, "a", upsert("a", 1)), rec(1, "poison", upsert("poison", 1)), rec(2, "b", upsert("b", 1))}
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, recs); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got, want := f.letters.reasons(), []string{"store_rejected:poison"}; !slices.Equal(got, want) {
		t.Errorf("dead letters = %v, want %v", got, want)
	}
	for _, k := range []string{"a", "b"} {
		if _, ok := f.rel.ledger["document:"+k+":v1:upsert"]; !ok {
			t.Errorf("ledger lacks %s, want the good records projected", k)
		}
	}
}

// TestRejectedBatchSendsEachLetterOnce: the letters of a batch leave
// before its stores are written; when a store then rejects the batch and
// its records are retried one by one, a conflict already dead-lettered is
// not sent again.
func TestRejectedBatchSendsEachLetterOnce(t *testing.T) {
	f := newFixture(t, Config{})
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	f.rel.fail = func(w *Write) error {
		for _, d := range w.Live {
			if d.Key == "poison" {
				return &StoreError{Store: StoreRelational, Kind: Rejected, Err: errors.New("value too long")}
			}
		}
		return nil
	}
	other := `{"document_key":"a","version":1,"chunks":[{"text":"other"}]}`
	recs := []*kgo.Record{rec(1, "a", other), rec(2, "poison", upsert("poison", 1)), rec(3, "bad", "{")}
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, recs); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got, want := f.letters.reasons(), []string{"not_json:bad", "store_rejected:poison", "version_conflict:a"}; !slices.Equal(got, want) {
		t.Errorf("dead letters = %v, want %v", got, want)
	}
}

func TestFatalFailureRetriesUntilStopped(t *testing.T) {
	f := newFixture(t, Config{})
	f.index.fail = func(*Write) error {
		return &StoreError{Store: StoreIndex, Kind: Fatal, Err: errors.New("permission denied")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := f.p.Handle(ctx, Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
	if err == nil {
		t.Fatal("Handle succeeded against a store that always fails, want an error")
	}
	if len(f.letters.reasons()) != 0 || len(f.rel.ledger) != 0 {
		t.Errorf("letters %v, ledger %v; want nothing: a fatal failure loses and commits nothing", f.letters.reasons(), f.rel.ledger)
	}
	if p := f.health.Problems(); len(p) != 1 || !strings.HasPrefix(p[0], "index: fatal failure") {
		t.Errorf("problems = %v, want the index's fatal failure", p)
	}
}

func TestFenceMismatchPolicies(t *testing.T) {
	for _, policy := range []FencePolicy{FenceDLQ, FenceHalt} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t, Config{OnFenceMismatch: policy, FenceRetries: 2})
			f.index.drop = "lost"
			recs := []*kgo.Record{rec(0, "fine", upsert("fine", 1)), rec(1, "lost", upsert("lost", 1))}
			err := f.p.Handle(context.Background(), Fence{}, TopicID{}, recs)
			writes := f.index.writes
			if writes != 3 {
				t.Errorf("index writes = %d, want 3 (the batch, then 2 re-projections)", writes)
			}
			switch policy {
			case FenceDLQ:
				if err != nil {
					t.Fatalf("Handle: %v", err)
				}
				if got, want := f.letters.reasons(), []string{"fence_mismatch:lost"}; !slices.Equal(got, want) {
					t.Errorf("dead letters = %v, want %v", got, want)
				}
			case FenceHalt:
				var halt *HaltError
				if !errors.As(err, &halt) || halt.Mismatches[0].Key != "lost" {
					t.Fatalf("Handle error = %v, want a HaltError about document lost", err)
				}
				if len(f.letters.reasons()) != 0 {
					t.Errorf("dead letters = %v, want none under halt", f.letters.reasons())
				}
			}
		})
	}
}

func TestRefusedDeadLetterHaltsThePartition(t *testing.T) {
	f := newFixture(t, Config{})
	f.letters.err = &PermanentError{Err: errors.New("MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.p.Handle(ctx, Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1)), rec(1, "bad", "not json")})
	halt, ok := errors.AsType[*HaltError](err)
	if !ok || halt.Reason != HaltDeadLetterRefused {
		t.Fatalf("Handle = %v, want a HaltError with reason %s", err, HaltDeadLetterRefused)
	}
	if ctx.Err() != nil || f.letters.sends != 1 {
		t.Errorf("sends = %d (context %v), want 1: a permanent refusal is not retried", f.letters.sends, ctx.Err())
	}
}

func TestLimitIsNotBlamedOnRecords(t *testing.T) {
	f := newFixture(t, Config{})
	limited := true
	f.index.fail = func(*Write) error {
		if limited {
			return &StoreError{Store: StoreIndex, Kind: Limit, LimitName: "upsert_max_batchsize", Err: errors.New(`Bad request: Limit exceeded 3 > 2 for "upsert limit"`)}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	recs := []*kgo.Record{rec(0, "a", upsert("a", 1)), rec(1, "b", upsert("b", 1))}
	if err := f.p.Handle(ctx, Fence{}, TopicID{}, recs); err == nil {
		t.Fatal("Handle succeeded against an index over its limit, want an error")
	}
	if got := f.letters.reasons(); len(got) != 0 {
		t.Errorf("dead letters = %v, want none: the limit is the collection's", got)
	}
	if got := testutil.ToFloat64(f.p.m.limitErrors.WithLabelValues(StoreIndex, "upsert_max_batchsize")); got < 1 {
		t.Errorf("projector_store_limit_errors_total{index,upsert_max_batchsize} = %v, want at least 1", got)
	}
	if p := f.health.Problems(); len(p) != 1 || !strings.Contains(p[0], "limit upsert_max_batchsize reached") {
		t.Errorf("problems = %v, want the index's limit by name", p)
	}
	limited = false
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, recs); err != nil {
		t.Fatalf("Handle after the limit was lifted: %v", err)
	}
	if len(f.rel.ledger) != 2 || len(f.letters.reasons()) != 0 {
		t.Errorf("ledger %d rows, letters %v; want 2 rows and no letter", len(f.rel.ledger), f.letters.reasons())
	}
}

// TestBatchSplitByBytes writes a batch of large records in parts bounded in
// bytes, so no store request grows with the records' size.
func TestBatchSplitByBytes(t *testing.T) {
	big := strings.Repeat("x", 3000)
	bigDoc := func(key string) string {
		return `{"document_key":"` + key + `","version":1,"chunks":[{"text":"` + big + `"}]}`
	}
	tests := []struct {
		name     string
		maxBytes int
		keys     []string
		// wantWrites is the index writes: one per part.
		wantWrites int
	}{
		{"all in one part", 1 << 20, []string{"a", "b", "c", "d"}, 1},
		{"two records a part", 2*(3100+16) + 100, []string{"a", "b", "c", "d"}, 2},
		{"a record over the bound alone", 100, []string{"a", "b", "c"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{MaxBatchBytes: tt.maxBytes})
			var recs []*kgo.Record
			for i, k := range tt.keys {
				recs = append(recs, rec(int64(i), k, bigDoc(k)))
			}
			if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, recs); err != nil {
				t.Fatal(err)
			}
			if f.index.writes != tt.wantWrites {
				t.Errorf("index writes = %d, want %d", f.index.writes, tt.wantWrites)
			}
			if len(f.rel.ledger) != len(tt.keys) {
				t.Errorf("ledger rows = %d, want %d", len(f.rel.ledger), len(tt.keys))
			}
		})
	}
}

// withdrawnMeanwhile is a relational store in which another member withdrew
// every document of a write at version 5 just before the write arrived, so
// the store's forward-only guard refuses it: the write of a member that
// lost its partition, landing late.
type withdrawnMeanwhile struct{ memRelational }

func (m withdrawnMeanwhile) Apply(_ context.Context, w *Write, _ []LedgerEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range w.Live {
		m.states[d.Key] = State{Version: 5, Withdrawn: true}
		delete(m.chunks, d.Key)
	}
	return nil
}

// TestSupersededWriteIsLeftAlone: a write whose documents the relational
// store holds another event of by the time it is fenced (here: withdrawn
// at a higher version, as by another log's writer) is neither written
// again nor dead-lettered, and makes no compensating write: the writer of
// the event the relational store holds fences it.
func TestSupersededWriteIsLeftAlone(t *testing.T) {
	f := newFixtureWith(t, Config{FenceRetries: 2}, func(m *memStore) Relational { return withdrawnMeanwhile{memRelational{m}} })
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got := f.letters.reasons(); len(got) != 0 {
		t.Errorf("dead letters = %v, want none", got)
	}
	if f.index.writes != 1 || f.graph.writes != 1 {
		t.Errorf("writes: index %d, graph %d; want 1 each, the write itself and nothing after", f.index.writes, f.graph.writes)
	}
}

// crashAt stops a batch at a fault point, as a process killed right there
// leaves it: written up to that point, nothing after it done. It panics
// with crash, which the test recovers.
type crashAt string

type crash struct{}

func (c crashAt) At(_ context.Context, point string) {
	if point == string(c) {
		panic(crash{})
	}
}

// TestConflictDeadLetteredWhateverTheCrash: a version conflict followed
// in its batch by a newer version must reach the dead-letter topic even
// when the process dies after the relational write. Read again, the
// conflict is stale (the newer version is stored), so the letter has to
// leave before any store is written; it used to leave after the fences,
// and such a crash lost it.
func TestConflictDeadLetteredWhateverTheCrash(t *testing.T) {
	for _, point := range []string{"before-index", "after-index", "after-graph", "after-relational"} {
		t.Run(point, func(t *testing.T) {
			f := newFixture(t, Config{})
			if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			other := `{"document_key":"a","version":1,"chunks":[{"text":"other"}]}`
			batch := []*kgo.Record{rec(1, "a", other), rec(2, "a", upsert("a", 2))}
			func() {
				defer func() {
					if r := recover(); r != (crash{}) {
						t.Fatalf("Handle with a crash at %s: recovered %v, want the crash", point, r)
					}
				}()
				f.p.d.Faults = crashAt(point)
				_ = f.p.Handle(context.Background(), Fence{}, TopicID{}, batch)
			}()
			f.p.d.Faults = nil
			if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, batch); err != nil {
				t.Fatalf("Handle of the batch delivered again: %v", err)
			}
			if got := f.letters.reasons(); !slices.Contains(got, "version_conflict:a") {
				t.Errorf("dead letters = %v, want the conflict of offset 1 among them", got)
			}
			if st := f.rel.states["a"]; st.Version != 2 {
				t.Errorf("relational version = %d, want 2", st.Version)
			}
		})
	}
}

// runAt runs fn once when the projection passes point: it forces another
// writer's whole batch in between two steps of this one.
type runAt struct {
	point string
	fn    func()
	once  *sync.Once
}

func (r runAt) At(_ context.Context, point string) {
	if point == r.point {
		r.once.Do(r.fn)
	}
}

// TestFencedWriteWritesNothingMore: a member that lost its partition
// passes the check of its token before its index write, then the new
// owner writes the document; the graph refuses the late member's write in
// its transaction. The late member halts the partition (reason fenced),
// never reaches the relational store, and writes nothing more: the points
// it wrote to the index stay there for the owner's settle, which is the
// only writer that may remove them. Before, it removed them itself, after
// reading states the owner had not committed yet, and so removed the
// owner's points of the same version (the interleaving explorer's
// owner-first cases).
func TestFencedWriteWritesNothingMore(t *testing.T) {
	for _, tt := range []struct {
		name  string
		newer string
		want  int // chunks of "a" the graph and the relational store end with
	}{
		{"new version", upsert("a", 2), 2},
		{"withdrawal", `{"document_key":"a","version":1,"op":"withdraw"}`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			f.graph.fenced, f.rel.fenced = true, true
			late, owner := Fence{Topic: "documents", Token: 1}, Fence{Topic: "documents", Token: 2}
			f.p.d.Faults = runAt{point: "index-checked", once: &sync.Once{}, fn: func() {
				f.p.d.Faults = nil
				if err := f.p.Handle(context.Background(), owner, TopicID{}, []*kgo.Record{rec(1, "a", tt.newer)}); err != nil {
					t.Errorf("the new owner's Handle: %v", err)
				}
			}}
			before := f.index.writes
			err := f.p.Handle(context.Background(), late, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
			var halt *HaltError
			if !errors.As(err, &halt) || halt.Reason != HaltFenced {
				t.Fatalf("the late member's Handle = %v, want a halt for reason fenced", err)
			}
			for _, s := range []*memStore{f.graph, f.rel} {
				if got := len(s.chunks["a"]); got != tt.want {
					t.Errorf("%s holds %d chunks of a, want the new owner's %d", s.name, got, tt.want)
				}
			}
			// The owner's batch wrote the index once, the late member once:
			// nothing after the refusal.
			if got := f.index.writes - before; got != 2 {
				t.Errorf("index writes = %d, want 2: the owner's and the late member's own, and no clean-up", got)
			}
			if got := testutil.ToFloat64(f.p.m.fenced.WithLabelValues(StoreGraph)); got != 1 {
				t.Errorf("projector_fenced_writes_total{store=graph} = %v, want 1", got)
			}
			if _, ok := f.rel.ledger["document:a:v1:upsert"]; ok {
				t.Error("the ledger holds the late member's v1, want it refused")
			}
		})
	}
}

// TestStaleTokenStopsBeforeTheIndex: a member whose token is already
// older than the relational store's stops at the read of the states, and
// writes nothing anywhere.
func TestStaleTokenStopsBeforeTheIndex(t *testing.T) {
	f := newFixture(t, Config{})
	f.graph.fenced, f.rel.fenced = true, true
	f.rel.newest = 5
	err := f.p.Handle(context.Background(), Fence{Topic: "documents", Token: 4}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))})
	var halt *HaltError
	if !errors.As(err, &halt) || halt.Reason != HaltFenced {
		t.Fatalf("Handle = %v, want a halt for reason fenced", err)
	}
	if f.index.writes+f.graph.writes+f.rel.writes != 0 {
		t.Errorf("writes: index %d, graph %d, relational %d; want none", f.index.writes, f.graph.writes, f.rel.writes)
	}
}

// TestWaitIsNotAFailure: a store that asks a write to wait (a repair holds
// the repair lease) has it written again until it takes it, without being
// reported as failing: no store error counted, readiness kept.
func TestWaitIsNotAFailure(t *testing.T) {
	f := newFixture(t, Config{})
	waits := 2
	var problems []string
	f.rel.fail = func(*Write) error {
		problems = append(problems, f.health.Problems()...)
		if waits > 0 {
			waits--
			return &WaitError{Store: StoreRelational, Reason: "a repair holds the repair lease"}
		}
		return nil
	}
	if err := f.p.Handle(context.Background(), Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if len(f.rel.chunks["a"]) != 2 {
		t.Errorf("relational chunks of a = %d after the wait, want 2", len(f.rel.chunks["a"]))
	}
	if len(problems) != 0 {
		t.Errorf("health problems while waiting = %v, want none", problems)
	}
	for _, k := range []ErrorKind{Transient, Rejected, Fatal, Limit} {
		if got := testutil.ToFloat64(f.p.m.storeErrors.WithLabelValues(StoreRelational, k.String())); got != 0 {
			t.Errorf("relational %s errors = %v, want 0", k, got)
		}
	}
}

// cancelAt ends the batch's context at a fault point, as a lost partition
// or a revoke past --revoke-timeout does; the batch goes on from there with
// an ended context.
type cancelAt struct {
	point  string
	cancel context.CancelFunc
}

func (c cancelAt) At(_ context.Context, point string) {
	if point == c.point {
		c.cancel()
	}
}

// TestCutShortWriteWritesNothingMore: a batch whose context ends after its
// index write (its partition was lost) writes nothing more: no graph or
// relational write, and no clean-up of the index, whose points the
// partition's next owner settles.
func TestCutShortWriteWritesNothingMore(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	f.p.d.Faults = cancelAt{point: "after-index", cancel: cancel}
	if err := f.p.Handle(ctx, Fence{}, TopicID{}, []*kgo.Record{rec(0, "a", upsert("a", 1))}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %v, want it cut short", err)
	}
	if f.index.writes != 1 || f.graph.writes != 0 || f.rel.writes != 0 {
		t.Errorf("writes: index %d, graph %d, relational %d; want the index's alone", f.index.writes, f.graph.writes, f.rel.writes)
	}
}
