package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/project"
)

func TestEmbedCache(t *testing.T) {
	s := openTest(t)
	c := NewEmbedCache(s)
	ctx := context.Background()
	a, b, x := embed.KeyOf("alpha"), embed.KeyOf("beta"), embed.KeyOf("gamma")
	va, vb := []float32{0.5, -1.25, 3}, []float32{1e-7, 0, -0}

	got, err := c.Lookup(ctx, "m", 3, []embed.Key{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("empty cache Lookup = %v, want nothing", got)
	}
	stored, err := c.Store(ctx, "m", 3, []embed.Key{a, b}, [][]float32{va, vb})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored[a], va) || !slices.Equal(stored[b], vb) {
		t.Errorf("Store returned %v, want the vectors it stored", stored)
	}
	// A second vector for a stored text does not replace the first, and
	// Store returns the first, so its caller uses what the cache holds.
	stored, err = c.Store(ctx, "m", 3, []embed.Key{x, a}, [][]float32{{7, 7, 7}, {9, 9, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored[a], va) || !slices.Equal(stored[x], []float32{7, 7, 7}) {
		t.Errorf("Store of a new and a stored text returned %v, want x: [7 7 7] and the first vector of a: %v", stored, va)
	}

	tests := []struct {
		name  string
		model string
		dim   int
		keys  []embed.Key
		want  map[embed.Key][]float32
	}{
		{"stored keys, first vector kept", "m", 3, []embed.Key{a, b, x, embed.KeyOf("never stored")}, map[embed.Key][]float32{a: va, b: vb, x: {7, 7, 7}}},
		{"another model", "m2", 3, []embed.Key{a, b}, map[embed.Key][]float32{}},
		{"another dimension", "m", 4, []embed.Key{a, b}, map[embed.Key][]float32{}},
		{"no keys", "m", 3, nil, map[embed.Key][]float32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Lookup(ctx, tt.model, tt.dim, tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Lookup = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if !slices.Equal(got[k], v) {
					t.Errorf("vector of %x = %v, want %v", k[:4], got[k], v)
				}
			}
		})
	}
}

func TestEmbedCacheManyKeysInOneCall(t *testing.T) {
	s := openTest(t)
	c := NewEmbedCache(s)
	ctx := context.Background()
	const n = 3000
	keys := make([]embed.Key, n)
	vecs := make([][]float32, n)
	for i := range keys {
		keys[i] = embed.KeyOf(fmt.Sprint("text ", i))
		vecs[i] = []float32{float32(i), 1}
	}
	if _, err := c.Store(ctx, "m", 2, keys, vecs); err != nil {
		t.Fatal(err)
	}
	got, err := c.Lookup(ctx, "m", 2, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("Lookup found %d of %d keys", len(got), n)
	}
	for i, k := range keys {
		if !slices.Equal(got[k], vecs[i]) {
			t.Fatalf("vector %d = %v, want %v", i, got[k], vecs[i])
		}
	}
}

func TestEmbedCacheCorruptEntryIsFatal(t *testing.T) {
	s := openTest(t)
	c := NewEmbedCache(s)
	ctx := context.Background()
	k := embed.KeyOf("x")
	if _, err := s.pool.Exec(ctx, `INSERT INTO embedding_cache (model, dim, text_sha256, vector) VALUES ('m', 2, $1, '\x000000'::bytea)`, k[:]); err != nil {
		t.Fatal(err)
	}
	_, err := c.Lookup(ctx, "m", 2, []embed.Key{k})
	if got := project.KindOf(err); got != project.Fatal {
		t.Errorf("Lookup of a 3-byte vector: kind %s (%v), want fatal", got, err)
	}
}
