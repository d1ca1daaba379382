package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
)

func TestRegisterFirstGeneration(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	set, err := s.Generations(ctx)
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
				Number: 1, Collection: fmt.Sprintf("chunks_%d", i), State: generation.Live,
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
	held, err := s.Generations(ctx)
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
	set, err := s.RegisterFirst(ctx, generation.Generation{Number: 1, Collection: "chunks_g1", State: generation.Live,
		Embedder: generation.Embedder{Kind: generation.EmbedderHashing, Dim: 4, Distance: generation.DistanceCosine}})
	if err != nil {
		t.Fatal(err)
	}
	epoch, held, err := s.GenerationSet(ctx)
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
