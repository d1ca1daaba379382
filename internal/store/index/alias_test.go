package index

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

func TestAliasOfAGeneration(t *testing.T) {
	s := openTest(t, storetest.Dim)
	ctx := context.Background()
	alias := s.cfg.Collection + "_alias"
	t.Cleanup(func() { _ = s.client.DeleteAlias(ctx, alias) })

	resolve := func(name string) (generation.NameKind, string) {
		t.Helper()
		kind, target, err := s.Resolve(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return kind, target
	}
	if kind, _ := resolve(alias); kind != generation.NameNone {
		t.Fatalf("Resolve of an unused name = %v, want NameNone", kind)
	}
	if kind, target := resolve(s.cfg.Collection); kind != generation.NameCollection || target != s.cfg.Collection {
		t.Fatalf("Resolve of a collection = %v %q, want NameCollection %q", kind, target, s.cfg.Collection)
	}
	for range 2 { // the second finds the alias and leaves it
		if err := s.EnsureAlias(ctx, alias, s.cfg.Collection); err != nil {
			t.Fatalf("EnsureAlias: %v", err)
		}
	}
	if kind, target := resolve(alias); kind != generation.NameAlias || target != s.cfg.Collection {
		t.Fatalf("Resolve of the alias = %v %q, want NameAlias of %q", kind, target, s.cfg.Collection)
	}
	// A store of the generation writes and reads its collection through
	// the shared connection; readers find the points through the alias.
	g := s.ForCollection(s.cfg.Collection, storetest.Dim)
	if g.Collection() != s.cfg.Collection {
		t.Fatalf("ForCollection writes %s, want %s", g.Collection(), s.cfg.Collection)
	}
	if err := g.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	byAlias := s.ForCollection(alias, storetest.Dim)
	if err := byAlias.CheckCollection(ctx); err != nil {
		t.Fatalf("CheckCollection through the alias: %v", err)
	}
	// A collection may not take the alias's place.
	if err := s.EnsureAlias(ctx, s.cfg.Collection, s.cfg.Collection); err == nil || !strings.Contains(err.Error(), "a collection of that name exists") {
		t.Fatalf("EnsureAlias over a collection = %v, want a refusal", err)
	}
}

// TestPointAlias: the switch moves an alias with one operation, so a
// reader searching it meanwhile always finds a collection; a legacy
// collection named as the alias gives way to it.
func TestPointAlias(t *testing.T) {
	a, b := openTest(t, storetest.Dim), openTest(t, storetest.Dim)
	ctx := context.Background()
	alias := a.cfg.Collection + "_alias"
	t.Cleanup(func() { _ = a.client.DeleteAlias(ctx, alias) })
	if err := a.EnsureAlias(ctx, alias, a.cfg.Collection); err != nil {
		t.Fatal(err)
	}
	reader := a.ForCollection(alias, storetest.Dim)
	stop := make(chan struct{})
	misses := make(chan error, 1)
	go func() {
		defer close(misses)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := reader.CountPoints(ctx); err != nil {
				misses <- err
				return
			}
		}
	}()
	for i := range 20 { // each move is one operation; the last ends on b
		to := []string{b.cfg.Collection, a.cfg.Collection}[i%2]
		for range 2 { // the second changes nothing
			if err := a.PointAlias(ctx, alias, to); err != nil {
				t.Fatalf("PointAlias to %s: %v", to, err)
			}
		}
	}
	close(stop)
	if err := <-misses; err != nil {
		t.Fatalf("a reader of the alias failed while it moved: %v", err)
	}
	if kind, target, err := a.Resolve(ctx, alias); err != nil || kind != generation.NameAlias || target != a.cfg.Collection {
		t.Fatalf("Resolve after the moves = %v %q %v, want the alias of %s", kind, target, err, a.cfg.Collection)
	}

	// A legacy generation: a collection named as the alias.
	legacy := openTest(t, storetest.Dim)
	if err := a.PointAlias(ctx, legacy.cfg.Collection, b.cfg.Collection); err != nil {
		t.Fatalf("PointAlias over a legacy collection: %v", err)
	}
	t.Cleanup(func() { _ = a.client.DeleteAlias(ctx, legacy.cfg.Collection) })
	if kind, target, err := a.Resolve(ctx, legacy.cfg.Collection); err != nil || kind != generation.NameAlias || target != b.cfg.Collection {
		t.Fatalf("Resolve after replacing a legacy collection = %v %q %v, want the alias of %s", kind, target, err, b.cfg.Collection)
	}
}

// TestPrune: a prune by a document's current state removes the points of
// its earlier events and writes nothing, so it takes nothing a later
// writer put there.
func TestPrune(t *testing.T) {
	s := openTest(t, storetest.Dim)
	ctx := context.Background()
	v1 := storetest.Doc("p", 1, "a", "b", "c")
	v3 := storetest.Doc("p", 3, "x")
	other := storetest.Doc("q", 1, "y")
	// Version 1 of p (a late fill's write) beside version 3 (run's).
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{v1, other}}); err != nil {
		t.Fatal(err)
	}
	if err := s.upsert(ctx, &project.Write{Live: []project.Document{v3}, Exact: true}); err != nil {
		t.Fatal(err)
	}
	// The current state is version 2, between the two: the prune removes
	// version 1, keeps version 3, and writes no point of version 2.
	if err := s.Prune(ctx, &project.Write{Live: []project.Document{storetest.Doc("p", 2, "m", "n")}}); err != nil {
		t.Fatal(err)
	}
	held, err := s.ChunkIDs(ctx, []string{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := held["p"], []uuid.UUID{v3.Chunks[0].ID}; !slices.Equal(got, want) {
		t.Errorf("p holds %v after the prune, want version 3's %v", got, want)
	}
	if got := held["q"]; len(got) != 1 {
		t.Errorf("q holds %v after a prune of p, want its one point", got)
	}
}
