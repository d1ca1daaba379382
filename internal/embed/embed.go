// Package embed turns chunk text into vectors for the index.
//
// The default embedder, Hashing, needs no model and no network: it is a pure
// function of the text, so a replay or a repair reproduces every vector
// exactly. It gives lexical similarity, not semantic similarity.
package embed

import (
	"context"
	"math"
)

// Hashing is a feature-hashing embedder: each token and each pair of adjacent
// tokens of the text adds ±1 to one of Dim buckets, chosen by a 64-bit FNV-1a
// hash, and the result is scaled to unit length.
//
// Tokens are the maximal runs of ASCII letters and digits and of bytes of
// non-ASCII characters; ASCII letters are lower-cased. No Unicode tables are
// used, so the vectors do not change between Go versions. A text without
// tokens maps to the first basis vector, since the index's cosine distance
// is undefined for the zero vector.
type Hashing struct {
	dim int
}

// NewHashing returns a hashing embedder of the given dimension (> 0).
func NewHashing(dim int) *Hashing { return &Hashing{dim: dim} }

// Dim returns the length of every vector.
func (h *Hashing) Dim() int { return h.dim }

// Name identifies the embedder in logs and in the embedding cache.
func (h *Hashing) Name() string { return "hashing" }

// Embed returns one unit vector per text. It never fails; the context and the
// error are there to satisfy embedders that call a service.
func (h *Hashing) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	backing := make([]float32, len(texts)*h.dim)
	acc := make([]float64, h.dim)
	for i, t := range texts {
		out[i] = backing[i*h.dim : (i+1)*h.dim : (i+1)*h.dim]
		h.embedOne(t, acc, out[i])
	}
	return out, nil
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// embedOne writes the vector of text into dst, using acc as scratch space.
func (h *Hashing) embedOne(text string, acc []float64, dst []float32) {
	clear(acc)
	var prev uint64
	havePrev := false
	add := func(x uint64) {
		// Mix before bucketing so nearby hashes spread over buckets, and
		// take the sign from a bit the bucket index does not use.
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 33
		sign := 1.0
		if x>>63 == 1 {
			sign = -1
		}
		acc[x%uint64(h.dim)] += sign
	}
	for i := 0; i < len(text); {
		if !isTokenByte(text[i]) {
			i++
			continue
		}
		var sum uint64 = fnvOffset
		for ; i < len(text) && isTokenByte(text[i]); i++ {
			c := text[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			sum ^= uint64(c)
			sum *= fnvPrime
		}
		add(sum)
		if havePrev {
			add(prev*31 + sum + 0x9e3779b97f4a7c15)
		}
		prev, havePrev = sum, true
	}
	var norm float64
	for _, v := range acc {
		norm += v * v
	}
	if norm == 0 {
		clear(dst)
		dst[0] = 1
		return
	}
	norm = math.Sqrt(norm)
	for j, v := range acc {
		dst[j] = float32(v / norm)
	}
}

func isTokenByte(c byte) bool {
	return c >= 0x80 || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}
