package embed

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector/projector/internal/project"
)

// Key identifies a text in the embedding cache: the SHA-256 of its UTF-8
// bytes.
type Key [sha256.Size]byte

// KeyOf returns the cache key of text.
func KeyOf(text string) Key { return sha256.Sum256([]byte(text)) }

// Cache stores vectors by model, dimension and text, so a replay or a
// repair gets back the vector the model gave the first time. It is
// implemented by the relational store (postgres.EmbedCache). Both calls
// must be safe for concurrent use.
type Cache interface {
	// Lookup returns the stored vectors of the keys it holds; the others
	// are absent from the map.
	Lookup(ctx context.Context, model string, dim int, keys []Key) (map[Key][]float32, error)
	// Store adds vecs[i] under keys[i] and returns the vector the cache
	// holds for each key afterwards: vecs[i], or the vector another writer
	// stored first, which a key keeps.
	Store(ctx context.Context, model string, dim int, keys []Key, vecs [][]float32) (map[Key][]float32, error)
}

// Cached is an embedder that asks its cache first and its inner embedder
// only for the texts the cache lacks, then stores their vectors before
// returning them. A model endpoint is only as deterministic as the model
// (batching, hardware and versions change the last bits); with the cache,
// a text is embedded once per model, and every later projection of it (a
// redelivery, a replay, a new version with the same chunk) reuses the same
// vector.
//
// The vectors are stored before Embed returns, and Embed returns the
// vectors the cache holds, so a chunk never reaches a store with a vector
// other than the cache's, even when two partitions embed the same text at
// once: a failed cache write fails the call, and the projector retries it.
type Cached struct {
	inner project.Embedder
	cache Cache
	model string
	m     *cacheMetrics
}

// NewCached returns a caching embedder around inner whose entries are
// filed under model; its metrics are registered on reg.
func NewCached(inner project.Embedder, cache Cache, model string, reg prometheus.Registerer) *Cached {
	return &Cached{inner: inner, cache: cache, model: model, m: newCacheMetrics(reg)}
}

// Dim returns the inner embedder's dimension.
func (c *Cached) Dim() int { return c.inner.Dim() }

// Embed returns one vector per text, in order. A text repeated in texts is
// looked up and embedded once.
func (c *Cached) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	keys := make([]Key, len(texts))
	var unique []Key
	first := make(map[Key]int, len(texts)) // key -> index of its first text
	for i, t := range texts {
		keys[i] = KeyOf(t)
		if _, ok := first[keys[i]]; !ok {
			first[keys[i]] = i
			unique = append(unique, keys[i])
		}
	}
	found, err := c.cache.Lookup(ctx, c.model, c.Dim(), unique)
	if err != nil {
		return nil, fmt.Errorf("look up embedding cache: %w", err)
	}
	var missKeys []Key
	var missTexts []string
	for _, k := range unique {
		if _, ok := found[k]; !ok {
			missKeys = append(missKeys, k)
			missTexts = append(missTexts, texts[first[k]])
		}
	}
	c.m.hits.Add(float64(len(unique) - len(missKeys)))
	c.m.misses.Add(float64(len(missKeys)))
	if len(missKeys) > 0 {
		vecs, err := c.inner.Embed(ctx, missTexts)
		if err != nil {
			return nil, err
		}
		if len(vecs) != len(missKeys) {
			return nil, &project.StoreError{Store: StoreName, Kind: project.Fatal,
				Err: fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(missKeys))}
		}
		stored, err := c.cache.Store(ctx, c.model, c.Dim(), missKeys, vecs)
		if err != nil {
			return nil, fmt.Errorf("store in embedding cache: %w", err)
		}
		if found == nil {
			found = make(map[Key][]float32, len(missKeys))
		}
		for _, k := range missKeys {
			v, ok := stored[k]
			if !ok {
				return nil, errors.New("store in embedding cache: no vector came back for a stored text")
			}
			found[k] = v
		}
	}
	out := make([][]float32, len(texts))
	for i, k := range keys {
		out[i] = found[k]
	}
	return out, nil
}

// cacheMetrics count the cache's answers.
type cacheMetrics struct {
	hits, misses prometheus.Counter
}

func newCacheMetrics(reg prometheus.Registerer) *cacheMetrics {
	m := &cacheMetrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_embed_cache_hits_total",
			Help: "Distinct chunk texts whose vector came from the embedding cache.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_embed_cache_misses_total",
			Help: "Distinct chunk texts the embedding cache lacked, sent to the model.",
		}),
	}
	reg.MustRegister(m.hits, m.misses)
	return m
}
