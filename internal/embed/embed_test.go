package embed

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func embedOne(t *testing.T, h *Hashing, text string) []float32 {
	t.Helper()
	v, err := h.Embed(context.Background(), []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot
}

func TestHashingIsUnitAndDeterministic(t *testing.T) {
	h := NewHashing(384)
	for _, text := range []string{"", "  ", "Hello, world!", "ünïcödé text 42", "a"} {
		v := embedOne(t, h, text)
		if len(v) != 384 {
			t.Fatalf("len = %d, want 384", len(v))
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("norm² of %q = %v, want 1", text, n)
		}
		again := embedOne(t, NewHashing(384), text)
		for i := range v {
			if v[i] != again[i] {
				t.Fatalf("%q: value %d differs between calls: %v then %v", text, i, v[i], again[i])
			}
		}
	}
}

func TestHashingGolden(t *testing.T) {
	// The vectors are part of what a replay must reproduce: a change to the
	// hashing changes every stored vector. Update only on purpose.
	v := embedOne(t, NewHashing(8), "The quick brown fox")
	want := []float32{0, 0, 0, 0, 0.4472136, 0, 0.8944272, 0}
	for i := range want {
		if math.Abs(float64(v[i]-want[i])) > 1e-7 {
			t.Fatalf("vector = %v, want %v", v, want)
		}
	}
}

func TestHashingSimilarity(t *testing.T) {
	h := NewHashing(384)
	a := embedOne(t, h, "the projector writes chunks to three stores")
	b := embedOne(t, h, "The projector writes CHUNKS to three stores.")
	c := embedOne(t, h, "bananas grow in warm climates")
	if got := cosine(a, b); got < 0.99 {
		t.Errorf("cosine of texts differing in case and punctuation = %v, want >= 0.99", got)
	}
	if got := cosine(a, c); got > 0.5 {
		t.Errorf("cosine of unrelated texts = %v, want <= 0.5", got)
	}
}

func BenchmarkHashing(b *testing.B) {
	h := NewHashing(384)
	texts := []string{"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat."}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Embed(context.Background(), texts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashingChunks embeds a batch of texts the size of the corpus's
// chunks (150 to 1,200 bytes), as FillVectors does for a batch. Its cost is
// the FNV-1a multiply chain over every byte, which the vectors depend on: a
// table lookup in place of the byte tests and a division-free remainder
// measured no faster.
func BenchmarkHashingChunks(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	words := []string{"stream", "Processing", "offset", "partition", "ünïcödé", "2026", "of", "the", "writer", "fence"}
	texts := make([]string, 64)
	for i := range texts {
		var s strings.Builder
		for s.Len() < 150+rng.IntN(1050) {
			s.WriteString(words[rng.IntN(len(words))])
			s.WriteString(" ")
		}
		texts[i] = s.String()
	}
	h := NewHashing(384)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Embed(context.Background(), texts); err != nil {
			b.Fatal(err)
		}
	}
}
