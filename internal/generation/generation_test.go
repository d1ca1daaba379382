package generation

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
)

// registry is a Registry in memory.
type registry struct {
	set        Set
	registered int
}

func (r *registry) Generations(context.Context, string) (Set, error) { return r.set, nil }

func (r *registry) RegisterFirst(_ context.Context, g Generation) (Set, error) {
	if len(r.set) == 0 {
		r.set = Set{g}
		r.registered++
	}
	return r.set, nil
}

// names answers Resolve with a fixed kind and target.
type names struct {
	kind   NameKind
	target string
}

func (n names) Resolve(context.Context, string) (NameKind, string, error) {
	return n.kind, n.target, nil
}

var (
	hashing = Embedder{Kind: EmbedderHashing, Dim: 384, Distance: DistanceCosine}
	http768 = Embedder{Kind: EmbedderHTTP, Model: "m2", URL: "http://e/v1", Dim: 768, Distance: DistanceCosine}
)

func TestBootstrap(t *testing.T) {
	tests := []struct {
		name           string
		held           Set
		names          names
		wantCollection string
		wantErr        string
	}{
		{"nothing on the server: a generation collection and its alias", nil, names{NameNone, ""}, "chunks_g1", ""},
		{"a collection from before generations is generation 1", nil, names{NameCollection, "chunks"}, "chunks", ""},
		{"the alias of generation 1 kept from an earlier registry", nil, names{NameAlias, "chunks_g1"}, "chunks_g1", ""},
		{"a foreign alias", nil, names{NameAlias, "other"}, "", "alias chunks of collection other"},
		{"a registry already held is kept", Set{{Number: 1, Collection: "chunks_g1", Embedder: http768, State: Live}}, names{NameCollection, "chunks"}, "chunks_g1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := &registry{set: tt.held}
			set, err := Bootstrap(context.Background(), reg, tt.names, "chunks", hashing)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Bootstrap = %v, %v; want an error saying %q", set, err, tt.wantErr)
				}
				if reg.registered != 0 {
					t.Errorf("registered %d generations, want none", reg.registered)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			live, ok := set.Live()
			if !ok || live.Collection != tt.wantCollection || live.Number != 1 {
				t.Fatalf("live generation %v (%v), want generation 1 in %s", live, ok, tt.wantCollection)
			}
			if tt.held == nil && !live.Embedder.Same(hashing) {
				t.Errorf("generation 1 embeds with %s, want the bootstrap's %s", live.Embedder, hashing)
			}
		})
	}
}

func TestBootstrapRefusesAnUnknownEmbedder(t *testing.T) {
	reg := &registry{}
	_, err := Bootstrap(context.Background(), reg, names{}, "chunks", Embedder{Kind: "word2vec", Dim: 8, Distance: DistanceCosine})
	if err == nil || reg.registered != 0 {
		t.Fatalf("Bootstrap with an unknown embedder = %v, registered %d; want an error and nothing registered", err, reg.registered)
	}
}

func TestCheck(t *testing.T) {
	g1 := Generation{Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Live}
	g2 := Generation{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building}
	tests := []struct {
		name    string
		set     Set
		flags   Embedder
		wantErr string
	}{
		{"the live generation's embedder", Set{g1}, hashing, ""},
		{"the model's address does not count", Set{g1, g2}, Embedder{Kind: EmbedderHTTP, Model: "m2", URL: "http://other/v1", Dim: 768, Distance: DistanceCosine}, ""},
		{"a building generation's embedder", Set{g1, g2}, http768, ""},
		{"another dimension", Set{g1}, Embedder{Kind: EmbedderHashing, Dim: 8, Distance: DistanceCosine}, "match no generation"},
		{"a retired generation's embedder", Set{{Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Retired}, {Number: 2, Collection: "chunks_g2", Embedder: http768, State: Live}}, hashing, "match no generation"},
		{"an embedder this build does not know", Set{g1, {Number: 2, Collection: "chunks_g2", Embedder: Embedder{Kind: "word2vec", Dim: 8, Distance: DistanceCosine}, State: Building}}, hashing, "not known to this build"},
		{"no live generation", Set{g2}, http768, "no live generation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.set.Check(tt.flags)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Check = %v, want an error saying %q", err, tt.wantErr)
			}
		})
	}
}

// setReader answers GenerationSet with the sets of reads, one a call, the
// last one for ever.
type setReader struct {
	reads []struct {
		epoch int64
		set   Set
	}
}

func (r *setReader) GenerationSet(context.Context, string) (int64, Set, error) {
	next := r.reads[0]
	if len(r.reads) > 1 {
		r.reads = r.reads[1:]
	}
	return next.epoch, next.set, nil
}

func (r *setReader) then(epoch int64, set ...Generation) *setReader {
	r.reads = append(r.reads, struct {
		epoch int64
		set   Set
	}{epoch, set})
	return r
}

func TestTracker(t *testing.T) {
	ctx := context.Background()
	g1 := Generation{Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Live}
	g2 := Generation{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building}
	opened := map[int]int{}
	open := func(_ context.Context, g Generation) (project.Generation, error) {
		opened[g.Number]++
		if g.Embedder.Kind == "word2vec" {
			return project.Generation{}, errors.New("no such embedder")
		}
		return project.Generation{Number: g.Number}, nil
	}
	reads := (&setReader{}).then(1, g1).then(2, g1, g2).then(2, g1, g2).
		then(3, g1, g2, Generation{Number: 3, Collection: "chunks_g3", Embedder: Embedder{Kind: "word2vec", Dim: 8, Distance: DistanceCosine}, State: Building})
	tr, err := NewTracker(ctx, reads, "chunks", 1, open)
	if err != nil {
		t.Fatal(err)
	}
	if epoch, beside := tr.Current(); epoch != 1 || len(beside) != 0 {
		t.Fatalf("Current = %d %v, want epoch 1 and nothing beside the primary", epoch, beside)
	}
	for range 2 { // the second finds the same epoch and opens nothing
		if err := tr.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if epoch, beside := tr.Current(); epoch != 2 || len(beside) != 1 || beside[0].Number != 2 || opened[2] != 1 {
		t.Fatalf("Current = %d %v (generation 2 opened %d times), want epoch 2 with generation 2 beside, opened once", epoch, beside, opened[2])
	}
	err = tr.Refresh(ctx)
	if _, ok := errors.AsType[*project.PermanentError](err); !ok || !strings.Contains(err.Error(), "cannot write generation 3") {
		t.Fatalf("Refresh meeting a generation the member cannot open = %v, want a PermanentError naming it", err)
	}
	if epoch, _ := tr.Current(); epoch != 2 {
		t.Errorf("epoch held after the refused refresh = %d, want 2: the set held is kept", epoch)
	}
}

func TestTrackerPrimaryNoLongerWritten(t *testing.T) {
	g1 := Generation{Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Retired}
	g2 := Generation{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Live}
	open := func(_ context.Context, g Generation) (project.Generation, error) {
		return project.Generation{Number: g.Number}, nil
	}
	_, err := NewTracker(context.Background(), (&setReader{}).then(5, g1, g2), "chunks", 1, open)
	if _, ok := errors.AsType[*project.PermanentError](err); !ok || !strings.Contains(err.Error(), "restart the member") {
		t.Fatalf("NewTracker of a retired primary = %v, want a PermanentError saying to restart", err)
	}
	// A member started before the switch, whose primary is retired while
	// it runs: its next refresh says so, and which generation is live.
	live, retiring := g1, g1
	live.State, retiring.State = Live, Retiring
	building := g2
	building.State = Building
	tr, err := NewTracker(context.Background(), (&setReader{}).then(1, live, building).then(2, retiring, g2).then(3, g1, g2), "chunks", 1, open)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh after the switch (its primary retiring, still written) = %v, want nil", err)
	}
	err = tr.Refresh(context.Background())
	if _, ok := errors.AsType[*project.PermanentError](err); !ok || !strings.Contains(err.Error(), "is retired") || !strings.Contains(err.Error(), "live generation 2") {
		t.Fatalf("Refresh after the retire of its primary = %v, want a PermanentError saying it is retired and that generation 2 is live", err)
	}
}

// TestAbortableAndRetirable: what abort and retire act on, run again too.
func TestAbortableAndRetirable(t *testing.T) {
	live := Generation{Number: 1, State: Live}
	tests := []struct {
		name string
		of   func(Set) (Generation, bool)
		set  Set
		want int // 0: none
	}{
		{"abort: nothing beside the live one", Set.Abortable, Set{live}, 0},
		{"abort: the generation being built", Set.Abortable, Set{live, {Number: 2, State: Aborted}, {Number: 3, State: Building}}, 3},
		{"abort: the last aborted, whose collection may be left", Set.Abortable, Set{live, {Number: 2, State: Aborted}, {Number: 3, State: Aborted}}, 3},
		{"abort: a retiring generation is not aborted", Set.Abortable, Set{{Number: 1, State: Retiring}, {Number: 2, State: Live}}, 0},
		{"retire: nothing switched", Set.Retirable, Set{live, {Number: 2, State: Building}}, 0},
		{"retire: the oldest retiring", Set.Retirable, Set{{Number: 1, State: Retiring}, {Number: 2, State: Retiring}, {Number: 3, State: Live}}, 1},
		{"retire: the last retired, whose collection may be left", Set.Retirable, Set{{Number: 1, State: Retired}, {Number: 2, State: Retired}, {Number: 3, State: Live}}, 2},
		{"retire: an aborted generation is not retired", Set.Retirable, Set{live, {Number: 2, State: Aborted}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok := tt.of(tt.set)
			if got := map[bool]int{true: g.Number}[ok]; got != tt.want {
				t.Errorf("got %d (%v), want %d", g.Number, ok, tt.want)
			}
		})
	}
}

func TestReconciled(t *testing.T) {
	set := Set{
		{Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Live},
		{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building},
		{Number: 3, Collection: "chunks_g3", Embedder: http768, State: Aborted},
	}
	tests := []struct {
		name    string
		n       int
		repair  bool
		want    int
		wantErr string
	}{
		{"the live one by default", 0, false, 1, ""},
		{"the live one repaired", 1, true, 1, ""},
		{"a generation being built, compared", 2, false, 2, ""},
		{"a generation being built, repaired", 2, true, 0, "cannot be repaired"},
		{"an aborted generation", 3, false, 0, "not written"},
		{"no such generation", 9, false, 0, "no generation 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := set.Reconciled(tt.n, tt.repair)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Reconciled = %v, %v; want an error saying %q", g, err, tt.wantErr)
				}
				return
			}
			if err != nil || g.Number != tt.want {
				t.Fatalf("Reconciled = %v, %v; want generation %d", g, err, tt.want)
			}
		})
	}
}

func TestSwitching(t *testing.T) {
	g1 := Generation{Alias: "chunks", Number: 1, Collection: "chunks_g1", Embedder: hashing, State: Live}
	legacy := Generation{Alias: "chunks", Number: 1, Collection: "chunks", Embedder: hashing, State: Live}
	filled := Generation{Alias: "chunks", Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building, Fill: Progress{Done: true}}
	partial := filled
	partial.Fill = Progress{Documents: 5}
	retiring, live2, retired := g1, filled, g1
	retiring.State, live2.State, retired.State = Retiring, Live, Retired
	back := retiring
	back.State = Live
	tests := []struct {
		name       string
		set        Set
		to         int
		force      bool
		want, from int
		registered bool
		fromState  State
		wantErr    string
	}{
		{"a filled generation", Set{g1, filled}, 0, false, 2, 1, false, Retiring, ""},
		{"a filled generation, named", Set{g1, filled}, 2, false, 2, 1, false, Retiring, ""},
		{"a fill not done", Set{g1, partial}, 0, false, 0, 0, false, "", "is not done"},
		{"a fill not done, forced", Set{g1, partial}, 0, true, 2, 1, false, Retiring, ""},
		{"from a legacy generation, which is retired", Set{legacy, filled}, 0, false, 2, 1, false, Retired, ""},
		{"a switch the registry recorded: the alias is left", Set{retiring, live2}, 0, false, 2, 1, true, Retiring, ""},
		{"back to the retiring generation", Set{retiring, live2}, 1, false, 1, 2, false, Retiring, ""},
		{"a switch back the registry recorded", Set{back, {Alias: "chunks", Number: 2, Collection: "chunks_g2", Embedder: http768, State: Retiring}}, 0, false, 1, 2, true, Retiring, ""},
		{"back to a retired generation", Set{retired, live2}, 1, false, 0, 0, false, "", "not written"},
		{"no such generation", Set{g1, filled}, 7, false, 0, 0, false, "", "no generation 7"},
		{"nothing built", Set{g1}, 0, false, 0, 0, false, "", "nothing to switch to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw, err := tt.set.Switching(tt.to, tt.force)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Switching = %+v, %v; want an error saying %q", sw, err, tt.wantErr)
				}
				return
			}
			if err != nil || sw.To.Number != tt.want || sw.From.Number != tt.from || sw.Registered != tt.registered || sw.FromState() != tt.fromState {
				t.Fatalf("Switching = %d from %d (registered %v, from becomes %s), %v; want %d from %d (%v, %s)",
					sw.To.Number, sw.From.Number, sw.Registered, sw.FromState(), err, tt.want, tt.from, tt.registered, tt.fromState)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name   string
		passes []map[string]int64
		want   map[string]int64
		calls  int
	}{
		{"clean at once", []map[string]int64{{}}, nil, 1},
		{"a document being written, written again meanwhile", []map[string]int64{{"a": 3}, {"a": 4}, {"a": 5}}, nil, 2},
		{"a document written once between, then clean", []map[string]int64{{"a": 3, "b": 1}, {"b": 1}, {}}, nil, 3},
		{"a document that differs at the same version", []map[string]int64{{"a": 3, "b": 1}, {"b": 1}, {"b": 1, "c": 2}}, map[string]int64{"b": 1}, 3},
		{"documents differing in turn, never one twice", []map[string]int64{{"a": 1}, {"b": 1}, {"a": 1}}, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := Verify(context.Background(), func(context.Context) (map[string]int64, error) {
				calls++
				return tt.passes[calls-1], nil
			}, len(tt.passes), time.Millisecond)
			if err != nil || !maps.Equal(got, tt.want) || calls != tt.calls {
				t.Fatalf("Verify = %v, %v after %d comparisons; want %v after %d", got, err, calls, tt.want, tt.calls)
			}
		})
	}
}
