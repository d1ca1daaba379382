package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/project"
)

// fakeDecisions is a decision store of a few documents in key order.
type fakeDecisions struct {
	docs  []Decision
	pages []string // the After of each call
	// known, when set, is called by each Known.
	known func()
}

func (f *fakeDecisions) Decisions(_ context.Context, p Page) ([]Decision, error) {
	f.pages = append(f.pages, p.After)
	var out []Decision
	for _, d := range f.docs {
		if d.Key > p.After && strings.HasPrefix(d.Key, p.Prefix) && len(out) < p.Limit {
			out = append(out, d)
		}
	}
	return out, nil
}

func (f *fakeDecisions) Known(_ context.Context, ks []string) (map[string]bool, error) {
	if f.known != nil {
		f.known()
	}
	out := map[string]bool{}
	for _, d := range f.docs {
		if slices.Contains(ks, d.Key) {
			out[d.Key] = true
		}
	}
	return out, nil
}

// Reprojection rebuilds documents with chunks but no content; incomplete
// lists keys the relational copy cannot rebuild.
func (f *fakeDecisions) reprojection(incomplete map[string][]int) func(context.Context, []string) (*project.Write, map[string][]int, error) {
	return func(_ context.Context, ks []string) (*project.Write, map[string][]int, error) {
		w := &project.Write{}
		for _, d := range f.docs {
			switch {
			case !slices.Contains(ks, d.Key) || incomplete[d.Key] != nil:
			case d.Withdrawn:
				w.Withdrawn = append(w.Withdrawn, project.Withdrawal{Key: d.Key, Version: d.Version})
			default:
				w.Live = append(w.Live, project.Document{Key: d.Key, Version: d.Version})
			}
		}
		return w, incomplete, nil
	}
}

type sourceFunc func(context.Context, []string) (*project.Write, map[string][]int, error)

func (f sourceFunc) Reprojection(ctx context.Context, ks []string) (*project.Write, map[string][]int, error) {
	return f(ctx, ks)
}

// fakeStore holds documents and scans its keys in the pages given. A run
// reads it from several goroutines: mu guards holds, deleted and
// deadlines.
type fakeStore struct {
	name    string
	scan    [][]string
	mu      sync.Mutex
	holds   map[string]Holding
	deleted []string
	// deadlines are the deadlines of the deletes' contexts.
	deadlines []time.Time
	scans     int
}

func (s *fakeStore) Name() string { return s.name }

func (s *fakeStore) Holdings(_ context.Context, ks []string) (map[string]Holding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Holding{}
	for _, k := range ks {
		if h, ok := s.holds[k]; ok {
			out[k] = h
		}
	}
	return out, nil
}

func (s *fakeStore) ScanKeys(_ context.Context, prefix string, _ int, fn func([]string) error) error {
	s.mu.Lock()
	s.scans++
	s.mu.Unlock()
	for _, page := range s.scan {
		if err := fn(page); err != nil {
			return err
		}
	}
	return nil
}

func (s *fakeStore) DeleteDocuments(ctx context.Context, ks []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline, _ := ctx.Deadline()
	s.deadlines = append(s.deadlines, deadline)
	s.deleted = append(s.deleted, ks...)
	for _, k := range ks {
		delete(s.holds, k)
	}
	return nil
}

// journal records the writes of a repair in order, with the deadlines of
// their contexts.
type journal struct {
	writes    []string
	deadlines []time.Time
	// after, when set, is called after each write is recorded, with its
	// context and store, and its error is the write's.
	after func(ctx context.Context, store string) error
}

type journalWriter struct {
	j     *journal
	store string
}

func (w journalWriter) Apply(ctx context.Context, wr *project.Write) error {
	w.j.writes = append(w.j.writes, w.store+":"+strings.Join(wr.Keys(), ","))
	deadline, _ := ctx.Deadline()
	w.j.deadlines = append(w.j.deadlines, deadline)
	if w.j.after != nil {
		return w.j.after(ctx, w.store)
	}
	return nil
}

// writeOrder is the write order of three stores that write to j.
func writeOrder(j *journal) WriteOrder {
	return WriteOrder{Index: journalWriter{j, "index"}, Graph: journalWriter{j, "graph"}, Relational: journalRelational{journalWriter{j, "relational"}}}
}

// fakeLease is a repair lease that holds, with a fixed write deadline,
// until it is lost, as a failed renewal loses it.
type fakeLease struct {
	mu       sync.Mutex
	deadline time.Time
	lost     error
}

// heldLease returns a lease whose writes may run for d.
func heldLease(d time.Duration) *fakeLease { return &fakeLease{deadline: time.Now().Add(d)} }

func (l *fakeLease) WriteDeadline() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.lost
}

func (l *fakeLease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = err
}

type journalRelational struct{ journalWriter }

func (w journalRelational) Apply(ctx context.Context, wr *project.Write, ledger []project.LedgerEntry) error {
	if ledger != nil {
		return fmt.Errorf("a repair wrote %d ledger rows, want none", len(ledger))
	}
	return w.journalWriter.Apply(ctx, wr)
}

type collect struct{ got []Discrepancy }

func (c *collect) Report(d *Discrepancy) error {
	c.got = append(c.got, *d)
	return nil
}

// lines returns the lines of the documents the decision store knows, in
// report order, then those of unknown documents, sorted: the scans for
// them run alongside the comparison, so their lines come in any order.
func (c *collect) lines() []string {
	var known, unknown []string
	for _, d := range c.got {
		line := fmt.Sprintf("%s %s %s %s", d.Store, d.Class, d.Key, d.Action)
		if d.Status == StatusUnknown {
			unknown = append(unknown, line)
		} else {
			known = append(known, line)
		}
	}
	slices.Sort(unknown)
	return append(known, unknown...)
}

// world is a decision store of five documents and two stores that
// disagree with it in every way.
func world() (*fakeDecisions, *fakeStore, *fakeStore) {
	dec := &fakeDecisions{docs: []Decision{
		{Key: "a", Version: 1, ChunkCount: 2},
		{Key: "b", Version: 2, ChunkCount: 1},
		{Key: "c", Version: 1, ChunkCount: 1},
		{Key: "d", Version: 3, Withdrawn: true},
		{Key: "e", Version: 1, ChunkCount: 1},
	}}
	index := &fakeStore{name: "index", holds: map[string]Holding{
		"a": {Chunks: held("a", 1, 0)},                             // missing
		"b": {Chunks: held("b", 2, 0)},                             // agrees
		"c": {Chunks: append(held("c", 1, 0), held("x", 1, 0)...)}, // a foreign id
		"d": {Chunks: held("d", 2, 0)},                             // withdrawn but present
		"e": {Chunks: held("e", 1, 0)},
		"z": {Chunks: held("z", 1, 0, 1)}, // unknown
	}, scan: [][]string{{"a", "z"}, {"b", "z", "c"}}}
	graph := &fakeStore{name: "graph", holds: map[string]Holding{
		"a": {Chunks: held("a", 1, 0, 1)},
		"b": {Chunks: held("b", 1, 0)}, // skewed
		"c": {Chunks: held("c", 1, 0)},
		"e": {Chunks: held("e", 1, 0)},
	}}
	return dec, index, graph
}

func TestRunReports(t *testing.T) {
	dec, index, graph := world()
	c := &collect{}
	r := New(Config{PageSize: 2}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{index, graph}})
	sum, err := r.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"index missing a ",
		"graph version_skew b ",
		"index orphaned c ",
		"index withdrawn_present d ",
		"index orphaned z ",
	}
	if fmt.Sprint(c.lines()) != fmt.Sprint(want) {
		t.Errorf("reported\n%s\nwant\n%s", strings.Join(c.lines(), "\n"), strings.Join(want, "\n"))
	}
	if got := fmt.Sprint(dec.pages); got != "[ b d]" {
		t.Errorf("pages after %s, want [ b d] (keyset pages of 2)", got)
	}
	if sum.Documents != 5 || sum.UnknownKeys != 1 || sum.Total() != 5 || sum.Unresolved() != 5 {
		t.Errorf("summary = %d documents, %d unknown, %d total, %d unresolved; want 5, 1, 5, 5", sum.Documents, sum.UnknownKeys, sum.Total(), sum.Unresolved())
	}
	if len(index.deleted) != 0 {
		t.Errorf("deleted %v without --delete-orphans, want nothing", index.deleted)
	}
	line := sum.Line([]string{"index", "graph"})
	for _, part := range []string{"total=5", "index.missing=1", "index.orphaned=2", "graph.version_skew=1", "index.withdrawn_present=1", "graph.missing=0"} {
		if !strings.Contains(line, " "+part+" ") {
			t.Errorf("summary line %q lacks %q", line, part)
		}
	}
}

func TestRunRepairs(t *testing.T) {
	tests := []struct {
		name          string
		deleteOrphans bool
		incomplete    map[string][]int
		wantWrites    []string
		wantActions   []string
		wantDeleted   []string
	}{
		{
			name:       "repair",
			wantWrites: []string{"index:a,b,d", "graph:a,b,d", "relational:a,b,d"},
			wantActions: []string{
				"index missing a reprojected", "graph version_skew b reprojected",
				"index orphaned c ", "index withdrawn_present d reprojected", "index orphaned z ",
			},
		},
		{
			name:          "repair and delete orphans",
			deleteOrphans: true,
			wantWrites:    []string{"index:a,b,c,d", "graph:a,b,c,d", "relational:a,b,c,d"},
			wantActions: []string{
				"index missing a reprojected", "graph version_skew b reprojected",
				"index orphaned c reprojected", "index withdrawn_present d reprojected", "index orphaned z deleted",
			},
			wantDeleted: []string{"z"},
		},
		{
			name:       "the relational copy lacks a chunk",
			incomplete: map[string][]int{"a": {1}},
			wantWrites: []string{"index:b,d", "graph:b,d", "relational:b,d"},
			wantActions: []string{
				"index missing a unrepairable", "graph version_skew b reprojected",
				"index orphaned c ", "index withdrawn_present d reprojected", "index orphaned z ",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, index, graph := world()
			j := &journal{}
			c := &collect{}
			r := New(Config{PageSize: 10, Repair: true, DeleteOrphans: tt.deleteOrphans}, zap.NewNop(), Deps{
				Decisions: dec, Source: sourceFunc(dec.reprojection(tt.incomplete)), Stores: []Store{index, graph},
				Writes: writeOrder(j), Lease: heldLease(time.Hour),
			})
			sum, err := r.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(j.writes) != fmt.Sprint(tt.wantWrites) {
				t.Errorf("writes = %v, want %v (index, graph, relational)", j.writes, tt.wantWrites)
			}
			if fmt.Sprint(c.lines()) != fmt.Sprint(tt.wantActions) {
				t.Errorf("reported\n%s\nwant\n%s", strings.Join(c.lines(), "\n"), strings.Join(tt.wantActions, "\n"))
			}
			if fmt.Sprint(index.deleted) != fmt.Sprint(tt.wantDeleted) {
				t.Errorf("deleted = %v, want %v", index.deleted, tt.wantDeleted)
			}
			resolved := 0
			for _, a := range tt.wantActions {
				if strings.HasSuffix(a, "reprojected") || strings.HasSuffix(a, "deleted") {
					resolved++
				}
			}
			if sum.Resolved != int64(resolved) {
				t.Errorf("resolved = %d, want %d", sum.Resolved, resolved)
			}
		})
	}
}

func TestRunSinceSkipsTheScans(t *testing.T) {
	dec, index, graph := world()
	c := &collect{}
	r := New(Config{Since: time.Now()}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{index, graph}})
	if _, err := r.Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.got {
		if d.Status == StatusUnknown {
			t.Errorf("reported unknown document %q with --since, want the scans skipped", d.Key)
		}
	}
}

// TestUnknownScanIsBounded fills a store with unknown documents, each in
// two pages of the scan as a Qdrant scroll may give them: a report-only run
// stops at MaxUnknown and says so, having reported each key once; with
// DeleteOrphans every one is removed, whatever their number, and no key
// is remembered.
func TestUnknownScanIsBounded(t *testing.T) {
	newStore := func() *fakeStore {
		s := &fakeStore{name: "index", holds: map[string]Holding{}}
		for i := range 10 {
			k := fmt.Sprintf("ghost-%d", i)
			s.holds[k] = Holding{Chunks: held(k, 1, 0)}
			s.scan = append(s.scan, []string{k}, []string{k})
		}
		return s
	}
	dec := &fakeDecisions{}

	index := newStore()
	c := &collect{}
	sum, err := New(Config{MaxUnknown: 4}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{index}}).Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if sum.UnknownKeys != 4 || len(c.got) != 4 || fmt.Sprint(sum.Capped) != "[index]" || !strings.Contains(sum.Line([]string{"index"}), " capped=index") {
		t.Errorf("report-only: %d unknown, %d reported, capped %v; want 4, 4 and the index capped", sum.UnknownKeys, len(c.got), sum.Capped)
	}

	index = newStore()
	sum, err = New(Config{MaxUnknown: 4, DeleteOrphans: true}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{index}, Lease: heldLease(time.Hour)}).Run(context.Background(), &collect{})
	if err != nil {
		t.Fatal(err)
	}
	if len(index.holds) != 0 || sum.UnknownKeys != 10 || len(sum.Capped) != 0 {
		t.Errorf("--delete-orphans: %d left, %d unknown, capped %v; want none left, 10 and no cap", len(index.holds), sum.UnknownKeys, sum.Capped)
	}
}

// TestRunConcurrently compares many small pages while three stores are
// scanned at once, each holding unknown documents that its scan returns
// twice: every discrepancy of a known document is reported once, in key
// order per page, every unknown document once per store, and the counts
// add up.
func TestRunConcurrently(t *testing.T) {
	dec := &fakeDecisions{}
	for i := range 40 {
		dec.docs = append(dec.docs, Decision{Key: fmt.Sprintf("k%03d", i), Version: 1, ChunkCount: 1})
	}
	var stores []Store
	var want []string
	for _, name := range []string{"index", "graph", "relational"} {
		s := &fakeStore{name: name, holds: map[string]Holding{}}
		var keys []string
		for i, d := range dec.docs {
			keys = append(keys, d.Key)
			if i%7 == len(stores) {
				continue // missing from this store
			}
			s.holds[d.Key] = Holding{Chunks: held(d.Key, 1, 0)}
		}
		for i := range 15 {
			k := fmt.Sprintf("u-%s-%02d", name, i)
			s.holds[k] = Holding{Chunks: held(k, 1, 0)}
			keys = append(keys, k)
		}
		for i := 0; i < len(keys); i += 4 {
			s.scan = append(s.scan, keys[i:min(i+4, len(keys))])
		}
		s.scan = append(s.scan, s.scan...)
		stores = append(stores, s)
	}
	for _, d := range dec.docs {
		for i, s := range stores {
			if slices.Index(dec.docs, d)%7 == i {
				want = append(want, s.Name()+" missing "+d.Key+" ")
			}
		}
	}
	for _, s := range stores {
		for i := range 15 {
			want = append(want, fmt.Sprintf("%s orphaned u-%s-%02d ", s.Name(), s.Name(), i))
		}
	}
	slices.Sort(want[len(want)-45:])
	c := &collect{}
	sum, err := New(Config{PageSize: 3}, zap.NewNop(), Deps{Decisions: dec, Stores: stores}).Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.lines(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sum.Documents != 40 || sum.UnknownKeys != 45 || sum.Total() != int64(len(want)) {
		t.Errorf("summary = %d documents, %d unknown, %d total; want 40, 45, %d", sum.Documents, sum.UnknownKeys, sum.Total(), len(want))
	}
}

// failingStore fails to read the holdings of one key.
type failingStore struct {
	*fakeStore
	key string
}

func (s failingStore) Holdings(ctx context.Context, ks []string) (map[string]Holding, error) {
	if slices.Contains(ks, s.key) {
		return nil, errors.New("store down")
	}
	return s.fakeStore.Holdings(ctx, ks)
}

// TestRunStopsAtAnError fails the reads of a store on a later page: the
// run returns that store's error, having waited for every read it started
// (TestMain fails on a leaked goroutine), and reports no page after it.
func TestRunStopsAtAnError(t *testing.T) {
	dec, index, graph := world()
	c := &collect{}
	r := New(Config{PageSize: 1}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{index, failingStore{graph, "c"}}})
	_, err := r.Run(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "read the graph store: store down") {
		t.Fatalf("Run error = %v, want the graph store's", err)
	}
	for _, d := range c.got {
		if d.Status != StatusUnknown && d.Key >= "c" {
			t.Errorf("reported %s %s of document %s, at or after the page that failed", d.Store, d.Class, d.Key)
		}
	}
}

// TestCappedInStoreOrder caps two stores' scans, which end in any order:
// the summary names them in the order of the stores.
func TestCappedInStoreOrder(t *testing.T) {
	var stores []Store
	for _, name := range []string{"index", "graph", "relational"} {
		s := &fakeStore{name: name, holds: map[string]Holding{}}
		if name != "graph" {
			for i := range 3 {
				k := fmt.Sprintf("ghost-%d", i)
				s.holds[k] = Holding{Chunks: held(k, 1, 0)}
				s.scan = append(s.scan, []string{k})
			}
		}
		stores = append(stores, s)
	}
	for range 20 {
		sum, err := New(Config{MaxUnknown: 2}, zap.NewNop(), Deps{Decisions: &fakeDecisions{}, Stores: stores}).Run(context.Background(), &collect{})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(sum.Capped); got != "[index relational]" {
			t.Fatalf("capped = %s, want [index relational]", got)
		}
	}
}

// countedStore is a fakeStore that counts what it holds; drift, when set,
// is added to the count of each call in turn, as a writer changing the
// store during a run would.
type countedStore struct {
	*fakeStore
	drift []int64
	calls int
}

func (s *countedStore) Count(_ context.Context, prefix string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, h := range s.holds {
		if strings.HasPrefix(k, prefix) {
			n += items(h)
		}
	}
	if s.calls < len(s.drift) {
		n += s.drift[s.calls]
	}
	s.calls++
	return n, true, nil
}

// TestCountsReplaceTheScan gives the reconciler stores that count what they
// hold: a store that holds only known documents, as many items before and
// after the comparison as it read, is not scanned; one that holds an
// unknown document, or whose count moved during the run, is, and its
// unknown documents are reported as a scan reports them.
func TestCountsReplaceTheScan(t *testing.T) {
	tests := []struct {
		name      string
		drift     []int64
		unknown   bool
		wantScans int
	}{
		{name: "agrees", wantScans: 0},
		{name: "holds an unknown document", unknown: true, wantScans: 1},
		{name: "changed during the run", drift: []int64{0, 1}, wantScans: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, _, g := world()
			graph := &countedStore{fakeStore: g, drift: tt.drift}
			graph.holds["b"] = Holding{Records: true, Present: true, Version: 2, Chunks: held("b", 2, 0)}
			graph.holds["d"] = Holding{Records: true}
			graph.scan = [][]string{{"a", "b", "c", "e"}}
			if tt.unknown {
				graph.holds["y"] = Holding{Records: true, Present: true, Version: 1}
				graph.scan = append(graph.scan, []string{"y"})
			}
			c := &collect{}
			sum, err := New(Config{PageSize: 2}, zap.NewNop(), Deps{Decisions: dec, Stores: []Store{graph}}).Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if graph.scans != tt.wantScans {
				t.Errorf("scanned the graph %d times, want %d", graph.scans, tt.wantScans)
			}
			want := "[]"
			if tt.unknown {
				want = "[graph orphaned y ]"
			}
			if got := fmt.Sprint(c.lines()); got != want {
				t.Errorf("reported %s, want %s", got, want)
			}
			if sum.Documents != 5 {
				t.Errorf("compared %d documents, want 5", sum.Documents)
			}
		})
	}
}

// TestRepairStopsWhenTheLeaseIsLost loses the repair lease, as a renewal
// that fails loses it, at points of a repair: the repair writes nothing
// more to any store, and fails with the lease's error.
func TestRepairStopsWhenTheLeaseIsLost(t *testing.T) {
	errLost := errors.New("the repair lease was lost")
	tests := []struct {
		name string
		// loseAfter is the store whose re-projection write loses the
		// lease; empty: the lease is lost when the scan asks the decision
		// store about the keys it found, before it deletes them.
		loseAfter   string
		wantWrites  []string
		wantDeleted []string
	}{
		{name: "during the index write", loseAfter: "index", wantWrites: []string{"index:a,b,d"}},
		{name: "during the graph write", loseAfter: "graph", wantWrites: []string{"index:a,b,d", "graph:a,b,d"}},
		{name: "before the deletion of unknown documents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, index, graph := world()
			lease := heldLease(time.Hour)
			j := &journal{}
			cfg := Config{PageSize: 10, Repair: true}
			if tt.loseAfter == "" {
				// Only unknown documents, so the deletion is the only write.
				dec = &fakeDecisions{known: func() { lease.lose(errLost) }}
				cfg = Config{PageSize: 10, DeleteOrphans: true}
			}
			j.after = func(_ context.Context, store string) error {
				if store == tt.loseAfter {
					lease.lose(errLost)
				}
				return nil
			}
			r := New(cfg, zap.NewNop(), Deps{
				Decisions: dec, Source: sourceFunc(dec.reprojection(nil)), Stores: []Store{index, graph},
				Writes: writeOrder(j), Lease: lease,
			})
			_, err := r.Run(context.Background(), &collect{})
			if !errors.Is(err, errLost) {
				t.Errorf("Run = %v, want the lost lease's error", err)
			}
			if fmt.Sprint(j.writes) != fmt.Sprint(tt.wantWrites) {
				t.Errorf("writes = %v, want %v", j.writes, tt.wantWrites)
			}
			if len(index.deleted) != 0 || len(graph.deleted) != 0 {
				t.Errorf("deleted %v from the index and %v from the graph, want nothing", index.deleted, graph.deleted)
			}
		})
	}
}

// TestRepairWritesUntilTheLeaseDeadline: every write of a repair, the
// re-projection's and the deletion's, runs with the lease's write deadline;
// a write still running at that deadline fails, saying so, and the repair
// writes nothing after it.
func TestRepairWritesUntilTheLeaseDeadline(t *testing.T) {
	dec, index, graph := world()
	lease := heldLease(time.Hour)
	j := &journal{}
	r := New(Config{PageSize: 10, Repair: true, DeleteOrphans: true}, zap.NewNop(), Deps{
		Decisions: dec, Source: sourceFunc(dec.reprojection(nil)), Stores: []Store{index, graph},
		Writes: writeOrder(j), Lease: lease,
	})
	if _, err := r.Run(context.Background(), &collect{}); err != nil {
		t.Fatal(err)
	}
	for i, d := range append(j.deadlines, index.deadlines...) {
		if !d.Equal(lease.deadline) {
			t.Errorf("write %d ran with deadline %v, want the lease's %v", i, d, lease.deadline)
		}
	}
	if len(j.deadlines) != 3 || len(index.deadlines) != 1 {
		t.Errorf("%d writes and %d deletes, want 3 and 1", len(j.deadlines), len(index.deadlines))
	}

	dec, index, graph = world()
	j = &journal{after: func(ctx context.Context, store string) error {
		if store != "graph" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("the write's context did not end at the lease's deadline")
		}
	}}
	r = New(Config{PageSize: 10, Repair: true}, zap.NewNop(), Deps{
		Decisions: dec, Source: sourceFunc(dec.reprojection(nil)), Stores: []Store{index, graph},
		Writes: writeOrder(j), Lease: heldLease(50 * time.Millisecond),
	})
	_, err := r.Run(context.Background(), &collect{})
	if !errors.Is(err, errLeaseDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run with a write past the lease's deadline = %v, want it to say so", err)
	}
	if want := []string{"index:a,b,d", "graph:a,b,d"}; fmt.Sprint(j.writes) != fmt.Sprint(want) {
		t.Errorf("writes = %v, want %v", j.writes, want)
	}
}

// TestRepairNeedsTheLease: a run that may write, given no lease, fails
// before it writes anything.
func TestRepairNeedsTheLease(t *testing.T) {
	for _, cfg := range []Config{{Repair: true}, {DeleteOrphans: true}} {
		dec, index, graph := world()
		j := &journal{}
		r := New(cfg, zap.NewNop(), Deps{
			Decisions: dec, Source: sourceFunc(dec.reprojection(nil)), Stores: []Store{index, graph}, Writes: writeOrder(j),
		})
		if _, err := r.Run(context.Background(), &collect{}); err == nil || len(j.writes) > 0 || len(index.deleted) > 0 {
			t.Errorf("%+v without a lease: error %v, %d writes, %d deletes; want an error and nothing written", cfg, err, len(j.writes), len(index.deleted))
		}
	}
}

// vectorWriter records the vectors of each chunk it is given.
type vectorWriter struct{ vectors map[string][]float32 }

func (v *vectorWriter) record(w *project.Write) error {
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			v.vectors[c.Text] = c.Vector
		}
	}
	return nil
}

type storeOf struct{ *vectorWriter }

func (s storeOf) Apply(_ context.Context, w *project.Write) error { return s.record(w) }

type relationalOf struct{ *vectorWriter }

func (r relationalOf) Apply(_ context.Context, w *project.Write, _ []project.LedgerEntry) error {
	return r.record(w)
}

// TestRepairWritesTheLiveGenerationsVectors: a repair after a switch
// reads chunk rows whose vectors the old live generation's model made; it
// writes every store with the live generation's, and keeps the rows that
// hold them already.
func TestRepairWritesTheLiveGenerationsVectors(t *testing.T) {
	index, graph, rel := &vectorWriter{map[string][]float32{}}, &vectorWriter{map[string][]float32{}}, &vectorWriter{map[string][]float32{}}
	emb := embed.NewHashing(2)
	o := WriteOrder{Index: storeOf{index}, Graph: storeOf{graph}, Relational: relationalOf{rel}, Embedder: emb, Generation: 2}
	want, err := emb.Embed(context.Background(), []string{"old"})
	if err != nil {
		t.Fatal(err)
	}
	w := &project.Write{Live: []project.Document{{Key: "d", Chunks: []project.Chunk{
		{Text: "old", Vector: []float32{9, 9, 9}, Generation: 1},
		{Text: "new", Vector: []float32{0, 2}, Generation: 2},
	}}}}
	if err := o.Apply(context.Background(), heldLease(time.Minute), w); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*vectorWriter{"index": index, "graph": graph, "relational": rel} {
		if got := s.vectors["old"]; !slices.Equal(got, want[0]) {
			t.Errorf("%s got the vector %v for a row of generation 1, want generation 2's embedder's %v", name, got, want[0])
		}
		if got := s.vectors["new"]; !slices.Equal(got, []float32{0, 2}) {
			t.Errorf("%s got the vector %v for a row of generation 2, want the row's [0 2]", name, got)
		}
	}
}
