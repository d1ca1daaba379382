// Package fakeclock is a clock for tests of time bounds (project.Clock):
// it moves only when the test moves it, and ends every context whose
// deadline it passes, so a test passes a bound at a chosen point of an
// interleaving without waiting for it.
package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a fake clock; the zero value is not usable, call New.
type Clock struct {
	mu        sync.Mutex
	now       time.Time
	deadlines []deadline
}

type deadline struct {
	at     time.Time
	cancel context.CancelFunc
}

// New returns a clock at a fixed time.
func New() *Clock { return &Clock{now: time.Unix(1e9, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// WithTimeout returns a context that the clock ends once it has moved d
// on (or that its parent or cancel ends first).
func (c *Clock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadlines = append(c.deadlines, deadline{at: c.now.Add(d), cancel: cancel})
	return ctx, cancel
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// AdvanceTo moves the clock to t, if later, ending the contexts due by
// then.
func (c *Clock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	var due []context.CancelFunc
	kept := c.deadlines[:0]
	for _, d := range c.deadlines {
		if d.at.After(c.now) {
			kept = append(kept, d)
		} else {
			due = append(due, d.cancel)
		}
	}
	c.deadlines = kept
	c.mu.Unlock()
	for _, cancel := range due {
		cancel()
	}
}
