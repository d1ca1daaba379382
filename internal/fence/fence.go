// Package fence checks, after each batch, that every store holds what the
// batch wrote.
//
// A fence is evidence, not agreement: the count fence compares numbers of
// chunks per document and passes when one chunk is missing and a foreign one
// is present; the ids fence compares the exact sets of chunk ids and catches
// that. Neither compares payloads. Agreement of the stores over all documents
// is the reconcile command's job.
package fence

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Mode selects what a fence compares.
type Mode string

const (
	// Count compares the number of chunks each store holds per document.
	// One grouped query per store per batch.
	Count Mode = "count"
	// IDs compares the exact set of chunk ids per document. One filtered,
	// ids-only scan per store per batch.
	IDs Mode = "ids"
	// Off skips fences; offsets are then committed on the stores' word alone.
	Off Mode = "off"
)

// ParseMode reads a --fence value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Count, IDs, Off:
		return m, nil
	}
	return "", fmt.Errorf("fence mode %q: want count, ids or off", s)
}

// Store is what a fence needs of a store: read-only, by document key.
type Store interface {
	// Name is the store's label: index, graph or relational.
	Name() string
	// ChunkCounts returns how many chunks the store holds per document key;
	// keys with none may be absent.
	ChunkCounts(ctx context.Context, keys []string) (map[string]int, error)
	// ChunkIDs returns the chunk ids the store holds per document key.
	ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error)
}

// Mismatch is one document that one store does not hold as written.
type Mismatch struct {
	Store string
	Key   string
	Want  int
	Got   int
	// Missing and Unexpected are set by the ids fence only.
	Missing    []uuid.UUID
	Unexpected []uuid.UUID
}

func (m Mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %q holds %d chunks, want %d", m.Store, m.Key, m.Got, m.Want)
	if len(m.Missing) > 0 || len(m.Unexpected) > 0 {
		fmt.Fprintf(&b, " (%d missing, %d unexpected)", len(m.Missing), len(m.Unexpected))
	}
	return b.String()
}

// Checker runs the fences of one mode over a fixed list of stores.
type Checker struct {
	mode       Mode
	stores     []Store
	checks     *prometheus.CounterVec
	mismatches *prometheus.CounterVec
}

// New returns a Checker registering its metrics on reg.
func New(mode Mode, reg prometheus.Registerer, stores ...Store) *Checker {
	c := &Checker{
		mode:   mode,
		stores: stores,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_fence_checks_total",
			Help: "Documents checked by a fence after a batch, per store.",
		}, []string{"store"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_fence_mismatches_total",
			Help: "Documents a fence found not held as written, per store (before re-projection).",
		}, []string{"store"}),
	}
	for _, s := range stores {
		c.checks.WithLabelValues(s.Name())
		c.mismatches.WithLabelValues(s.Name())
	}
	reg.MustRegister(c.checks, c.mismatches)
	return c
}

// Of returns a Checker of c's mode over other stores, counting in c's
// metrics under their names: the fence of an index generation written
// beside the live one counts as the index's.
func (c *Checker) Of(stores ...Store) *Checker {
	return &Checker{mode: c.mode, stores: stores, checks: c.checks, mismatches: c.mismatches}
}

// Mode returns the checker's mode.
func (c *Checker) Mode() Mode { return c.mode }

// Check compares every store with want (document key -> the exact chunk ids
// it must hold; none for a withdrawn document). Stores are read
// concurrently. An error means a store could not be read, not a mismatch.
func (c *Checker) Check(ctx context.Context, want map[string][]uuid.UUID) ([]Mismatch, error) {
	if c.mode == Off || len(want) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	found := make([][]Mismatch, len(c.stores))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range c.stores {
		g.Go(func() error {
			var err error
			if c.mode == IDs {
				found[i], err = checkIDs(gctx, s, keys, want)
			} else {
				found[i], err = checkCounts(gctx, s, keys, want)
			}
			if err != nil {
				return fmt.Errorf("%s fence: %w", s.Name(), err)
			}
			c.checks.WithLabelValues(s.Name()).Add(float64(len(keys)))
			c.mismatches.WithLabelValues(s.Name()).Add(float64(len(found[i])))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []Mismatch
	for _, f := range found {
		out = append(out, f...)
	}
	return out, nil
}

func checkCounts(ctx context.Context, s Store, keys []string, want map[string][]uuid.UUID) ([]Mismatch, error) {
	got, err := s.ChunkCounts(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []Mismatch
	for _, k := range keys {
		if got[k] != len(want[k]) {
			out = append(out, Mismatch{Store: s.Name(), Key: k, Want: len(want[k]), Got: got[k]})
		}
	}
	return out, nil
}

func checkIDs(ctx context.Context, s Store, keys []string, want map[string][]uuid.UUID) ([]Mismatch, error) {
	got, err := s.ChunkIDs(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []Mismatch
	for _, k := range keys {
		missing, unexpected := Diff(want[k], got[k])
		if len(missing) > 0 || len(unexpected) > 0 {
			out = append(out, Mismatch{
				Store: s.Name(), Key: k, Want: len(want[k]), Got: len(got[k]),
				Missing: missing, Unexpected: unexpected,
			})
		}
	}
	return out, nil
}

// Diff returns the ids of want absent from got, and the ids of got absent
// from want. A duplicate in got counts as unexpected.
func Diff(want, got []uuid.UUID) (missing, unexpected []uuid.UUID) {
	need := make(map[uuid.UUID]int, len(want))
	for _, id := range want {
		need[id]++
	}
	for _, id := range got {
		if need[id] > 0 {
			need[id]--
			continue
		}
		unexpected = append(unexpected, id)
	}
	for _, id := range want {
		if need[id] > 0 {
			need[id]--
			missing = append(missing, id)
		}
	}
	return missing, unexpected
}
