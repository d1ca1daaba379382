package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// twoInFlight handles batches of two records, two batches at once.
func twoInFlight(cfg *Config) { cfg.BatchRecords, cfg.BatchesInFlight = 2, 2 }

// gate lets a test hold a batch, by its first offset, until it says so,
// and see which batches started.
type gate struct {
	mu      sync.Mutex
	started map[int64]bool
	changed chan struct{}
}

func newGate() *gate { return &gate{started: map[int64]bool{}, changed: make(chan struct{})} }

func (g *gate) start(offset int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started[offset] = true
	close(g.changed)
	g.changed = make(chan struct{})
}

// waitStarted blocks until the batch at offset started or ctx ended.
func (g *gate) waitStarted(ctx context.Context, offset int64) error {
	for {
		g.mu.Lock()
		ok, changed := g.started[offset], g.changed
		g.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *gate) hasStarted(offset int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started[offset]
}

// TestDisjointBatchesOverlap: the batch after one still in flight starts
// when they share no key, and nothing is committed past the first batch
// until it is done, although the second is done before it.
func TestDisjointBatchesOverlap(t *testing.T) {
	c := newClusterKeys(t, 1, []string{"a", "b", "c", "d"})
	g := newGate()
	release := make(chan struct{})
	m := c.startWith("overlap", handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
		g.start(recs[0].Offset)
		if recs[0].Offset == 0 {
			// Held until the test has seen the second batch done.
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}), twoInFlight)
	waitFor(t, "the second batch started while the first is held", func() bool { return g.hasStarted(2) })
	if got := c.committed("overlap"); len(got) != 0 {
		t.Errorf("committed = %v while the first batch is in flight, want nothing", got)
	}
	close(release)
	waitFor(t, "both batches committed", func() bool { return c.committed("overlap")[0] == 4 })
	m.stop()
}

// TestBatchesWithACommonKeyDoNotOverlap: every batch shares a key with the
// next, so no two are ever in flight together; the same handler over
// disjoint keys does see two at once, so the count can tell.
func TestBatchesWithACommonKeyDoNotOverlap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chained bool
		want    int
	}{
		{"chained keys", true, 1},
		{"disjoint keys", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			for j := range 20 {
				if tc.chained {
					// Batch j is [x<j>, x<j+1>]: it shares x<j+1> with batch j+1.
					keys = append(keys, fmt.Sprint("x", j), fmt.Sprint("x", j+1))
				} else {
					keys = append(keys, fmt.Sprint("y", 2*j), fmt.Sprint("y", 2*j+1))
				}
			}
			c := newClusterKeys(t, 1, keys)
			var mu sync.Mutex
			running, most, handled := 0, 0, 0
			g := newGate()
			m := c.startWith("chain", handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				g.start(recs[0].Offset)
				if recs[0].Offset%4 == 0 {
					// Wait for the next batch, so that an overlap is certain
					// rather than a matter of timing; with chained keys it
					// must not start, and the wait gives up after a while.
					wait := ctx
					if tc.chained {
						var cancel context.CancelFunc
						wait, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
						defer cancel()
					}
					_ = g.waitStarted(wait, recs[0].Offset+2)
				}
				mu.Lock()
				running--
				handled += len(recs)
				mu.Unlock()
				return nil
			}), twoInFlight)
			waitFor(t, "every record handled", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return handled == len(keys)
			})
			waitFor(t, "every record committed", func() bool { return c.committed("chain")[0] == int64(len(keys)) })
			m.stop()
			mu.Lock()
			defer mu.Unlock()
			if most != tc.want {
				t.Errorf("most batches in flight at once = %d, want %d", most, tc.want)
			}
		})
	}
}

// TestFailedBatchCancelsTheNext: when a batch fails while the next one is
// in flight, the next is cancelled, nothing is committed past the failed
// one, and the partition halts with its cause.
func TestFailedBatchCancelsTheNext(t *testing.T) {
	c := newClusterKeys(t, 1, []string{"a", "b", "c", "d"})
	g := newGate()
	var mu sync.Mutex
	cancelled := false
	m := c.startWith("cancel", handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
		g.start(recs[0].Offset)
		if recs[0].Offset == 0 {
			if err := g.waitStarted(ctx, 2); err != nil {
				return err
			}
			return errors.New("read document states: permission denied")
		}
		<-ctx.Done()
		mu.Lock()
		cancelled = true
		mu.Unlock()
		return nil // a handler that ignores its cancellation
	}), twoInFlight)
	waitFor(t, "the partition halted", func() bool {
		return slices.ContainsFunc(m.health.Problems(), func(p string) bool { return strings.Contains(p, "permission denied") })
	})
	mu.Lock()
	wasCancelled := cancelled
	mu.Unlock()
	if !wasCancelled {
		t.Error("the batch after the failed one was not cancelled")
	}
	m.stop()
	if got := c.committed("cancel"); len(got) != 0 {
		t.Errorf("committed = %v, want nothing: the first batch failed", got)
	}
}
