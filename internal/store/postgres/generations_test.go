package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
)

func TestRegisterFirstGeneration(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	set, err := s.Generations(ctx, "chunks")
	if err != nil || len(set) != 0 {
		t.Fatalf("Generations of a new schema = %v, %v; want none", set, err)
	}
	// Members that bootstrap at once, each with its own idea of
	// generation 1: one wins, and every one reads the winner back.
	const members = 4
	sets := make([]generation.Set, members)
	errs := make([]error, members)
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			sets[i], errs[i] = s.RegisterFirst(ctx, generation.Generation{
				Alias: "chunks", Number: 1, Collection: fmt.Sprintf("chunks_%d", i), State: generation.Live,
				Embedder: generation.Embedder{Kind: generation.EmbedderHashing, Dim: 8 + i, Distance: generation.DistanceCosine},
			})
		})
	}
	wg.Wait()
	for i := range members {
		if errs[i] != nil {
			t.Fatalf("RegisterFirst of member %d: %v", i, errs[i])
		}
		if len(sets[i]) != 1 || sets[i][0] != sets[0][0] {
			t.Fatalf("member %d read %v, member 0 %v: want the one generation every member registered", i, sets[i], sets[0])
		}
	}
	held, err := s.Generations(ctx, "chunks")
	if err != nil || len(held) != 1 || held[0] != sets[0][0] {
		t.Fatalf("Generations = %v, %v; want %v", held, err, sets[0])
	}
	var epoch int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM generation_set`).Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("generation set epoch = %d, %v; want 1: raised once, by the registration that inserted", epoch, err)
	}
}

func TestApplyRefusesAnotherGenerationEpoch(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	set, err := s.RegisterFirst(ctx, generation.Generation{Alias: "chunks", Number: 1, Collection: "chunks_g1", State: generation.Live,
		Embedder: generation.Embedder{Kind: generation.EmbedderHashing, Dim: 4, Distance: generation.DistanceCosine}})
	if err != nil {
		t.Fatal(err)
	}
	epoch, held, err := s.GenerationSet(ctx, "chunks")
	if err != nil || epoch != 1 || len(held) != 1 || held[0] != set[0] {
		t.Fatalf("GenerationSet = %d %v %v, want epoch 1 and the registered generation", epoch, held, err)
	}
	w := write("a")
	w.Epoch = 1
	if err := s.Apply(ctx, w, nil); err != nil {
		t.Fatalf("Apply of the registry's epoch: %v", err)
	}
	// A generation is started: the set's epoch moves on.
	if _, err := s.pool.Exec(ctx, `UPDATE generation_set SET epoch = epoch + 1`); err != nil {
		t.Fatal(err)
	}
	b := write("b")
	b.Epoch = 1
	err = s.Apply(ctx, b, nil)
	changed, ok := errors.AsType[*project.GenerationsChangedError](err)
	if !ok || changed.Wrote != 1 || changed.Now != 2 {
		t.Fatalf("Apply of an older epoch = %v, want a GenerationsChangedError from 1 to 2", err)
	}
	states, err := s.States(ctx, project.Fence{}, []string{"b"})
	if err != nil || len(states) != 0 {
		t.Fatalf("states of the refused write's document = %v, %v; want none written", states, err)
	}
	b.Epoch = 0 // a repair's write carries no epoch and is not checked
	if err := s.Apply(ctx, b, nil); err != nil {
		t.Fatalf("Apply without an epoch: %v", err)
	}
}

func TestRegisterGenerationAndFillLease(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	hashing := generation.Embedder{Kind: generation.EmbedderHashing, Dim: 4, Distance: generation.DistanceCosine}
	if _, err := s.RegisterFirst(ctx, generation.Generation{Alias: "chunks", Number: 1, Collection: "chunks_g1", State: generation.Live, Embedder: hashing}); err != nil {
		t.Fatal(err)
	}
	g2 := generation.Generation{Alias: "chunks", Number: 2, Collection: "chunks_g2", State: generation.Building,
		Embedder: generation.Embedder{Kind: generation.EmbedderHashing, Dim: 8, Distance: generation.DistanceCosine}}
	for range 2 { // the second is a rerun, which changes nothing
		set, err := s.RegisterGeneration(ctx, g2)
		if err != nil || len(set) != 2 || set[1] != g2 {
			t.Fatalf("RegisterGeneration = %v, %v; want generations 1 and 2", set, err)
		}
	}
	if epoch, _, err := s.GenerationSet(ctx, "chunks"); err != nil || epoch != 2 {
		t.Fatalf("epoch %d, %v after a registration and its rerun, want 2", epoch, err)
	}
	g3 := g2
	g3.Number, g3.Collection = 3, "chunks_g3"
	if _, err := s.RegisterGeneration(ctx, g3); err == nil {
		t.Fatal("a second generation registered while one is building, want a refusal")
	}

	token, p, err := s.TakeFill(ctx, g2, time.Minute)
	if err != nil || p != (generation.Progress{}) {
		t.Fatalf("TakeFill = %d %+v %v, want a token and no progress", token, p, err)
	}
	if _, _, err := s.TakeFill(ctx, g2, time.Minute); err == nil {
		t.Fatal("a second TakeFill while the lease holds, want a FillHeldError")
	}
	want := generation.Progress{After: "k", Documents: 3, Chunks: 7}
	if err := s.RenewFill(ctx, g2, token, time.Minute, want); err != nil {
		t.Fatal(err)
	}
	if err := s.RenewFill(ctx, g2, token+1, time.Minute, want); err == nil {
		t.Fatal("RenewFill with another token, want a FillLostError")
	}
	if err := s.ReleaseFill(ctx, g2, token); err != nil {
		t.Fatal(err)
	}
	next, p, err := s.TakeFill(ctx, g2, time.Minute)
	if err != nil || next <= token || p != want {
		t.Fatalf("TakeFill after a release = %d %+v %v, want a newer token and the progress %+v", next, p, err, want)
	}
	if err := s.RenewFill(ctx, g2, token, time.Minute, want); err == nil {
		t.Fatal("RenewFill of the earlier fill, want a FillLostError")
	}
	g1 := g2
	g1.Number, g1.Collection = 1, "chunks_g1"
	if _, _, err := s.TakeFill(ctx, g1, time.Minute); err == nil {
		t.Fatal("TakeFill of the live generation, want a refusal")
	}
}

// hashingOf is the hashing embedder of dimension dim.
func hashingOf(dim int) generation.Embedder {
	return generation.Embedder{Kind: generation.EmbedderHashing, Dim: dim, Distance: generation.DistanceCosine}
}

// openBuilding opens a store whose registry of alias c has generation 1
// live in collection first, and generation 2 being built.
func openBuilding(t *testing.T, first string) (*Store, generation.Generation, generation.Generation) {
	t.Helper()
	s := openTest(t)
	ctx := context.Background()
	g1 := generation.Generation{Alias: "c", Number: 1, Collection: first, State: generation.Live, Embedder: hashingOf(4)}
	g2 := generation.Generation{Alias: "c", Number: 2, Collection: "c_g2", State: generation.Building, Embedder: hashingOf(8)}
	if _, err := s.RegisterFirst(ctx, g1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterGeneration(ctx, g2); err != nil {
		t.Fatal(err)
	}
	return s, g1, g2
}

func TestAbortGeneration(t *testing.T) {
	s, g1, g2 := openBuilding(t, "c_g1")
	ctx := context.Background()
	// Another alias's generation 1 beside them: its own registry.
	other := generation.Generation{Alias: "d", Number: 1, Collection: "d_g1", State: generation.Live, Embedder: hashingOf(16)}
	if set, err := s.RegisterFirst(ctx, other); err != nil || len(set) != 1 || set[0] != other {
		t.Fatalf("RegisterFirst of another alias = %v, %v; want its own generation 1", set, err)
	}
	token, _, err := s.TakeFill(ctx, g2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if left, err := s.FillHeldFor(ctx, g2); err != nil || left <= 0 {
		t.Fatalf("FillHeldFor a held lease = %s, %v; want some time", left, err)
	}
	for range 2 { // the second is a rerun
		if err := s.AbortGeneration(ctx, g2); err != nil {
			t.Fatalf("AbortGeneration: %v", err)
		}
	}
	epoch, set, err := s.GenerationSet(ctx, "c")
	if err != nil || epoch != 4 || len(set) != 2 || set[1].State != generation.Aborted {
		t.Fatalf("after the abort: epoch %d, %v, %v; want epoch 4 and generation 2 aborted", epoch, set, err)
	}
	if err := s.RenewFill(ctx, g2, token, time.Minute, generation.Progress{}); err == nil {
		t.Error("the fill renewed its lease of an aborted generation, want a FillLostError")
	}
	if err := s.AbortGeneration(ctx, g1); err == nil {
		t.Error("the live generation aborted, want a refusal")
	}
	// The next start takes the next number: an aborted one is not reused.
	next, rerun, err := set.Next("c", hashingOf(8))
	if err != nil || rerun || next.Number != 3 {
		t.Fatalf("Next after an abort = %v %v %v, want generation 3", next, rerun, err)
	}
}

func TestSwitchGeneration(t *testing.T) {
	s, g1, g2 := openBuilding(t, "c_g1")
	ctx := context.Background()
	sw := generation.Switch{To: g2, From: g1}
	if err := s.SwitchGeneration(ctx, sw, true); err == nil || !strings.Contains(err.Error(), "not done") {
		t.Fatalf("a switch to a generation whose fill is not done = %v, want a refusal", err)
	}
	token, _, err := s.TakeFill(ctx, g2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RenewFill(ctx, g2, token, time.Minute, generation.Progress{After: "z", Documents: 1, Done: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a rerun, which changes nothing
		if err := s.SwitchGeneration(ctx, sw, true); err != nil {
			t.Fatalf("SwitchGeneration: %v", err)
		}
	}
	epoch, set, err := s.GenerationSet(ctx, "c")
	if err != nil || epoch != 3 || set[0].State != generation.Retiring || set[1].State != generation.Live {
		t.Fatalf("after the switch: epoch %d, %v, %v; want epoch 3, generation 1 retiring, 2 live", epoch, set, err)
	}
	// The registry's switch found again: only the alias is left.
	again, err := set.Switching(0, false)
	if err != nil || !again.Registered || again.To.Number != 2 || again.From.Number != 1 {
		t.Fatalf("Switching after the switch = %+v, %v; want the registered switch from 1 to 2", again, err)
	}
	// A switch planned from a registry read before another one ran.
	g3 := generation.Generation{Alias: "c", Number: 3, Collection: "c_g3", State: generation.Building, Embedder: hashingOf(16)}
	if _, err := s.RegisterGeneration(ctx, g3); err != nil {
		t.Fatal(err)
	}
	if err := s.SwitchGeneration(ctx, generation.Switch{To: g3, From: g1}, false); err == nil || !strings.Contains(err.Error(), "no longer the live one") {
		t.Fatalf("a switch from a generation no longer live = %v, want a refusal", err)
	}
	// Back to generation 1, which run still writes: no fill to be done.
	if err := s.SwitchGeneration(ctx, generation.Switch{To: g1, From: g2}, true); err != nil {
		t.Fatalf("a switch back to the retiring generation: %v", err)
	}
	if _, set, err := s.GenerationSet(ctx, "c"); err != nil || set[0].State != generation.Live || set[1].State != generation.Retiring {
		t.Fatalf("after the switch back: %v, %v; want generation 1 live, 2 retiring", set, err)
	}
	if _, err := s.RetireGeneration(ctx, g2, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.SwitchGeneration(ctx, generation.Switch{To: g2, From: g1}, false); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("a switch to a retired generation = %v, want a refusal", err)
	}
}

func TestSwitchFromALegacyGenerationRetiresIt(t *testing.T) {
	s, g1, g2 := openBuilding(t, "c")
	ctx := context.Background()
	if err := s.SwitchGeneration(ctx, generation.Switch{To: g2, From: g1}, false); err != nil {
		t.Fatal(err)
	}
	set, err := s.Generations(ctx, "c")
	if err != nil || set[0].State != generation.Retired || set[1].State != generation.Live {
		t.Fatalf("after a switch from a legacy generation: %v, %v; want generation 1 retired (its collection goes), 2 live", set, err)
	}
}

func TestRetireGeneration(t *testing.T) {
	s, g1, g2 := openBuilding(t, "c_g1")
	ctx := context.Background()
	if _, err := s.RetireGeneration(ctx, g1, 0); err == nil || !strings.Contains(err.Error(), "only a generation the alias left") {
		t.Fatalf("a retire of the live generation = %v, want a refusal", err)
	}
	if err := s.SwitchGeneration(ctx, generation.Switch{To: g2, From: g1}, false); err != nil {
		t.Fatal(err)
	}
	left, err := s.RetireGeneration(ctx, g1, time.Hour)
	if err != nil || left < 59*time.Minute || left > time.Hour {
		t.Fatalf("RetireGeneration = %s, %v; want about an hour of grace", left, err)
	}
	epoch, set, err := s.GenerationSet(ctx, "c")
	if err != nil || epoch != 4 || set[0].State != generation.Retired || len(set.Written()) != 1 {
		t.Fatalf("after the retire: epoch %d, %v, %v; want epoch 4 and generation 1 retired, no longer written", epoch, set, err)
	}
	// Run again with another grace: the first one's stands, and the epoch
	// stays.
	if left, err := s.RetireGeneration(ctx, g1, 0); err != nil || left < 59*time.Minute {
		t.Fatalf("RetireGeneration again = %s, %v; want the first grace's time left", left, err)
	}
	if epoch, _, _ := s.GenerationSet(ctx, "c"); epoch != 4 {
		t.Errorf("epoch %d after a retire run again, want 4 unchanged", epoch)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE index_generations SET retire_after = now() - interval '1 second' WHERE generation = 1`); err != nil {
		t.Fatal(err)
	}
	if left, err := s.RetireGeneration(ctx, g1, time.Hour); err != nil || left != 0 {
		t.Fatalf("RetireGeneration after the grace = %s, %v; want 0: the collection may go", left, err)
	}
	if g, ok := set.Retirable(); !ok || g.Number != 1 {
		t.Errorf("Retirable = %v %v, want generation 1, whose collection a retire run again deletes", g, ok)
	}
}
