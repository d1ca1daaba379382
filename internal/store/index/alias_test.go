package index

import (
	"context"
	"strings"
	"testing"

	"github.com/projector/projector/internal/generation"
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
