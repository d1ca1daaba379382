package consume

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/project"
)

// settleRecorder records, in order, the start and end of each batch and
// settle of its partitions, each batch taking a few milliseconds of work.
type settleRecorder struct {
	mu     sync.Mutex
	events []string
	// settled holds the fence of each settle and when it started.
	settled []project.Fence
	at      []time.Time
}

func (r *settleRecorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *settleRecorder) Handle(ctx context.Context, _ project.Fence, _ project.TopicID, recs []*kgo.Record) error {
	r.add(fmt.Sprintf("handle %d", recs[0].Offset))
	defer r.add(fmt.Sprintf("handled %d", recs[0].Offset))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Millisecond): // the batch's work
		return nil
	}
}

func (r *settleRecorder) Settle(_ context.Context, f project.Fence) error {
	r.mu.Lock()
	r.settled = append(r.settled, f)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	r.add("settle")
	r.add("settled")
	return nil
}

func (r *settleRecorder) snapshot() ([]string, []project.Fence, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events), slices.Clone(r.settled), slices.Clone(r.at)
}

// TestSettleOnceTheLateWindowEnds: a member that took a partition from one
// that did not release it settles the index once, when the late window of
// its fence is over, with no batch of the partition in flight meanwhile;
// the batches before and after it are all handled.
func TestSettleOnceTheLateWindowEnds(t *testing.T) {
	c := newCluster(t, 1, 200)
	fences := &memFences{late: 150 * time.Millisecond}
	r := &settleRecorder{}
	m := c.startFenced("settle", r, fences, func(cfg *Config) { cfg.BatchRecords, cfg.BatchesInFlight = 5, 2 })
	waitFor(t, "every record committed", func() bool { return c.committed("settle")[0] == 200 })
	m.stop()
	events, settled, at := r.snapshot()
	if len(settled) != 1 {
		t.Fatalf("settles = %d, want 1 (events %v)", len(settled), events)
	}
	if at[0].Before(settled[0].LateUntil) {
		t.Errorf("settled at %s, before the late window ended at %s", at[0].Format(time.StampMicro), settled[0].LateUntil.Format(time.StampMicro))
	}
	open := 0
	for i, e := range events {
		switch {
		case e == "settle" && open != 0:
			t.Errorf("the settle started with %d batches in flight: %v", open, events[max(0, i-4):i+1])
		case e == "settle":
			if next := events[i+1]; next != "settled" {
				t.Errorf("a batch started during the settle: %v", events[i:i+2])
			}
		case len(e) > 7 && e[:7] == "handle ":
			open++
		case len(e) > 8 && e[:8] == "handled ":
			open--
		}
	}
}

// TestReleaseOnlyWhenNothingIsOnItsWay: a member that stops with every
// batch ended releases its partitions, so their next owner need not wait
// out a late window; one whose batch was cancelled mid-write (a revoke past
// the revoke timeout) does not.
func TestReleaseOnlyWhenNothingIsOnItsWay(t *testing.T) {
	t.Run("clean stop", func(t *testing.T) {
		c := newCluster(t, 1, 10)
		fences := &memFences{}
		m := c.startFenced("release", handlerFunc(func(context.Context, []*kgo.Record) error { return nil }), fences, func(*Config) {})
		waitFor(t, "every record committed", func() bool { return c.committed("release")[0] == 10 })
		m.stop()
		if got := fences.releasedTokens(0); !slices.Equal(got, []int64{1}) {
			t.Errorf("released tokens = %v, want [1]", got)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		c := newCluster(t, 2, 10)
		fences := &memFences{}
		var mu sync.Mutex
		inFlight := map[int32]bool{}
		first := c.startFenced("cut", handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
			mu.Lock()
			inFlight[recs[0].Partition] = true
			mu.Unlock()
			<-ctx.Done() // a store that never answers
			return ctx.Err()
		}), fences, func(*Config) {})
		waitFor(t, "the first member stuck in both partitions", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return inFlight[0] && inFlight[1]
		})
		second := c.startFenced("cut", handlerFunc(func(context.Context, []*kgo.Record) error { return nil }), fences, func(*Config) {})
		var moved int32 = -1
		waitFor(t, "a partition moved to the second member and committed", func() bool {
			for p, at := range c.committed("cut") {
				if at == 10 {
					moved = p
					return true
				}
			}
			return false
		})
		second.stop()
		first.stop()
		if got := fences.releasedTokens(moved); slices.Contains(got, 1) {
			t.Errorf("released tokens of partition %d = %v: the member whose batch was cancelled released its token 1", moved, got)
		}
	})
}
