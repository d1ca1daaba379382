// Package retry is the service's one retry policy: how long to wait before
// the next attempt (capped exponential backoff with equal jitter) and the
// wait itself, which a context ends. The store calls, the embedder and the
// start-up wait all retry through it; what is retried and what stops is
// decided by asking the error (project.KindOf), never here.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy bounds the waits between attempts.
type Policy struct {
	// Min is the wait after the first failure; each further failure
	// doubles it.
	Min time.Duration
	// Max caps the wait; failures that need an operator wait Max at once
	// (see Slow).
	Max time.Duration
}

// Delay is the wait after failed attempt number attempt (counting from 0):
// Min doubled attempt times, capped at Max, of which half is fixed and half
// random, so many partitions retrying at once spread out instead of
// hitting a recovering store together.
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Min << min(attempt, 30)
	if d > p.Max || d <= 0 {
		d = p.Max
	}
	return d/2 + rand.N(d/2+1)
}

// Slow is the wait after a failure that no quick retry heals (a fatal
// error, a store's limit): Max, so the service keeps trying without
// flooding the logs and the store, and recovers by itself once fixed.
func (p Policy) Slow() time.Duration { return p.Max }

// Sleep waits d, or until ctx ends, and returns ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
