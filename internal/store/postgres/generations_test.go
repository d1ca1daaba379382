package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/projector/projector/internal/generation"
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
