// Package shutdown bounds the end of a process. The public contract
// (§3) promises that a process asked to stop (SIGTERM) exits within 10
// seconds, whatever state its store connections are in: a connection
// whose peer passes no byte and resets nothing can hold a driver's Close
// for minutes, and a step that ignores its deadline (a bug) for ever. So
// each step of a stop gets a share of the budget (docs/operations.md,
// "Stopping"): `run`'s in-flight batches and group leave at most
// --shutdown-timeout (consume.MaxShutdownTimeout, 6 s), the release of
// each partition's token 2 s (consume's releaseTimeout), the stores'
// closes CloseTimeout together (CloseAll): 9 s at the most. A Watchdog
// ends the process at Limit whatever is still running.
package shutdown

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

const (
	// Limit is how long after the stop signal the Watchdog lets a process
	// run: past the orderly stop's 9 s, below the contract's 10 s.
	Limit = 9500 * time.Millisecond
	// CloseTimeout is how long the stores' closes may take together: a
	// store that answers closes in milliseconds.
	CloseTimeout = time.Second
)

// Closer is one thing to close when the process stops.
type Closer struct {
	// Name says what it is, for the error that abandons it.
	Name  string
	Close func(ctx context.Context) error
}

// CloseAll closes every closer at once, under a context that ends after
// timeout, and waits for them at most that long. A close that has not
// finished by then is given up: it was cut short by its context, or its
// goroutine is left to end with the process, which takes its sockets with
// it; the error names them. What a close that finished in time returns is
// not reported: the process is stopping, and nothing it could do about it
// remains.
func CloseAll(ctx context.Context, timeout time.Duration, closers ...Closer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu      sync.Mutex
		pending = make(map[string]bool, len(closers))
		done    = make(chan struct{}, len(closers))
	)
	for _, c := range closers {
		pending[c.Name] = true
		go func() {
			_ = c.Close(ctx)
			if ctx.Err() == nil {
				mu.Lock()
				delete(pending, c.Name)
				mu.Unlock()
			}
			done <- struct{}{}
		}()
	}
wait:
	for range closers {
		select {
		case <-done:
		case <-ctx.Done():
			break wait
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, c := range closers {
		if pending[c.Name] {
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("gave up the close of %s after %s: its connections did not answer", strings.Join(names, ", "), timeout)
}

// Watchdog calls fire once limit has passed since ctx ended (the stop
// signal), unless the returned disarm is called first. It is the last
// resort behind every bounded step of a stop: fire is expected to end the
// process.
func Watchdog(ctx context.Context, limit time.Duration, fire func()) (disarm func()) {
	var (
		mu       sync.Mutex
		timer    *time.Timer
		disarmed bool
	)
	stopArming := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !disarmed {
			timer = time.AfterFunc(limit, fire)
		}
	})
	return func() {
		stopArming()
		mu.Lock()
		defer mu.Unlock()
		disarmed = true
		if timer != nil {
			timer.Stop()
		}
	}
}
