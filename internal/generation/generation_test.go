package generation

import (
	"context"
	"strings"
	"testing"
)

// registry is a Registry in memory.
type registry struct {
	set        Set
	registered int
}

func (r *registry) Generations(context.Context) (Set, error) { return r.set, nil }

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
