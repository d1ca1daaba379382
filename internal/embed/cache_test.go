package embed

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projector/projector/internal/project"
)

// memCache is a Cache in memory that can be told to fail.
type memCache struct {
	mu                  sync.Mutex
	m                   map[string][]float32
	lookupErr, storeErr error
}

func newMemCache() *memCache { return &memCache{m: map[string][]float32{}} }

func cacheKey(model string, dim int, k Key) string {
	return model + "\x00" + strconv.Itoa(dim) + "\x00" + string(k[:])
}

func (c *memCache) Lookup(_ context.Context, model string, dim int, keys []Key) (map[Key][]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lookupErr != nil {
		return nil, c.lookupErr
	}
	out := map[Key][]float32{}
	for _, k := range keys {
		if v, ok := c.m[cacheKey(model, dim, k)]; ok {
			out[k] = v
		}
	}
	return out, nil
}

func (c *memCache) Store(_ context.Context, model string, dim int, keys []Key, vecs [][]float32) (map[Key][]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storeErr != nil {
		return nil, c.storeErr
	}
	out := make(map[Key][]float32, len(keys))
	for i, k := range keys {
		if _, ok := c.m[cacheKey(model, dim, k)]; !ok {
			c.m[cacheKey(model, dim, k)] = vecs[i]
		}
		out[k] = c.m[cacheKey(model, dim, k)]
	}
	return out, nil
}

// countingEmbedder records the texts it is asked for. Its vectors change
// with every call, like a model that is not deterministic, so a test sees
// whether a vector came from the cache or from a new call.
type countingEmbedder struct {
	dim   int
	calls [][]string
	err   error
}

func (e *countingEmbedder) Dim() int { return e.dim }

func (e *countingEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.calls = append(e.calls, slices.Clone(texts))
	if e.err != nil {
		return nil, e.err
	}
	vecs, _ := NewHashing(e.dim).Embed(context.Background(), texts)
	for _, v := range vecs {
		v[0] += float32(len(e.calls))
	}
	return vecs, nil
}

func TestCachedEmbedsEachTextOnce(t *testing.T) {
	ctx := context.Background()
	inner := &countingEmbedder{dim: 4}
	cache := newMemCache()
	reg := prometheus.NewRegistry()
	c := NewCached(inner, cache, "m1", reg)

	first, err := c.Embed(ctx, []string{"a", "b", "a", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"a", "b", "c"}}; !slices.EqualFunc(inner.calls, want, slices.Equal) {
		t.Fatalf("inner calls = %q, want %q (each distinct text once)", inner.calls, want)
	}
	if !slices.Equal(first[0], first[2]) {
		t.Errorf("the two vectors of \"a\" differ: %v and %v", first[0], first[2])
	}

	// A replay: nothing new is embedded, every vector is the first one.
	again, err := c.Embed(ctx, []string{"c", "a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.calls) != 1 {
		t.Fatalf("inner calls after the replay = %q, want only the first", inner.calls)
	}
	for i, j := range []int{3, 0, 1} {
		if !slices.Equal(again[i], first[j]) {
			t.Errorf("replayed vector %d = %v, want the cached %v", i, again[i], first[j])
		}
	}

	// A new text among cached ones: only it is embedded.
	mixed, err := c.Embed(ctx, []string{"b", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if got := inner.calls[len(inner.calls)-1]; !slices.Equal(got, []string{"d"}) {
		t.Errorf("last inner call = %q, want [d]", got)
	}
	if !slices.Equal(mixed[0], first[1]) || len(mixed[1]) != 4 {
		t.Errorf("vectors = %v, want the cached vector of b %v and a new one", mixed, first[1])
	}
	if got, want := testutil.ToFloat64(c.m.hits), 4.0; got != want {
		t.Errorf("cache hits = %v, want %v", got, want)
	}
	if got, want := testutil.ToFloat64(c.m.misses), 4.0; got != want {
		t.Errorf("cache misses = %v, want %v", got, want)
	}

	// Another model does not share the entries.
	other := NewCached(inner, cache, "m2", prometheus.NewRegistry())
	if _, err := other.Embed(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if got := inner.calls[len(inner.calls)-1]; !slices.Equal(got, []string{"a"}) {
		t.Errorf("last inner call = %q, want [a] embedded again for model m2", got)
	}
}

func TestCachedErrors(t *testing.T) {
	fatal := &project.StoreError{Store: project.StoreRelational, Kind: project.Fatal, Err: errors.New("permission denied")}
	rejected := &project.StoreError{Store: StoreName, Kind: project.Rejected, Err: errors.New("too long")}
	tests := []struct {
		name       string
		lookupErr  error
		storeErr   error
		innerErr   error
		want       error
		innerCalls int
	}{
		{"lookup fails", fatal, nil, nil, fatal, 0},
		{"store fails", nil, fatal, nil, fatal, 1},
		{"inner refuses", nil, nil, rejected, rejected, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &countingEmbedder{dim: 4, err: tt.innerErr}
			cache := newMemCache()
			cache.lookupErr, cache.storeErr = tt.lookupErr, tt.storeErr
			_, err := NewCached(inner, cache, "m", prometheus.NewRegistry()).Embed(context.Background(), []string{"x"})
			if !errors.Is(err, tt.want) || project.KindOf(err) != project.KindOf(tt.want) {
				t.Errorf("error = %v (kind %s), want %v (kind %s)", err, project.KindOf(err), tt.want, project.KindOf(tt.want))
			}
			if len(inner.calls) != tt.innerCalls {
				t.Errorf("inner calls = %d, want %d", len(inner.calls), tt.innerCalls)
			}
		})
	}
}

// racingCache is a cache in which another writer stores first a vector
// for every text, between the Lookup and the Store of the caller.
type racingCache struct {
	*memCache
	first []float32
}

func (c racingCache) Store(ctx context.Context, model string, dim int, keys []Key, vecs [][]float32) (map[Key][]float32, error) {
	firsts := make([][]float32, len(keys))
	for i := range firsts {
		firsts[i] = c.first
	}
	if _, err := c.memCache.Store(ctx, model, dim, keys, firsts); err != nil {
		return nil, err
	}
	return c.memCache.Store(ctx, model, dim, keys, vecs)
}

func TestCachedReturnsTheVectorOfTheFirstWriter(t *testing.T) {
	first := []float32{1, 2, 3, 4}
	c := NewCached(&countingEmbedder{dim: 4}, racingCache{newMemCache(), first}, "m", prometheus.NewRegistry())
	got, err := c.Embed(context.Background(), []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if !slices.Equal(v, first) {
			t.Errorf("vector %d = %v, want the first writer's %v", i, v, first)
		}
	}
}
