package shutdown

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// CloseAll and Watchdog start goroutines; the tests end each one.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCloseAll: every close runs at once under a context that ends at the
// timeout; one that has not finished by then is given up and named, and
// CloseAll returns without waiting longer. Before, a store whose connections passed no
// byte held the process's exit for as long as its driver's Close waited.
func TestCloseAll(t *testing.T) {
	quick := func(context.Context) error { return nil }
	failing := func(context.Context) error { return errors.New("close failed") }
	obeying := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	hung := make(chan struct{})
	defer close(hung)
	ignoring := func(context.Context) error { <-hung; return nil }

	for _, tc := range []struct {
		name    string
		closers []Closer
		want    string // in the error; "" for none
	}{
		{"all close", []Closer{{"a", quick}, {"b", failing}}, ""},
		{"a close that ends with its context", []Closer{{"a", quick}, {"b", obeying}}, "gave up the close of b after"},
		{"a close that ignores its context", []Closer{{"a", ignoring}, {"b", quick}, {"c", ignoring}}, "gave up the close of a, c after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := CloseAll(context.Background(), 100*time.Millisecond, tc.closers...)
			took := time.Since(start)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CloseAll = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CloseAll = %v, want an error containing %q", err, tc.want)
			}
			if took > time.Second {
				t.Errorf("CloseAll took %s, want about its timeout of 100ms", took)
			}
		})
	}
}

func TestWatchdog(t *testing.T) {
	const limit = 50 * time.Millisecond
	t.Run("fires after the limit once the context ends", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		fired := make(chan time.Time, 1)
		disarm := Watchdog(ctx, limit, func() { fired <- time.Now() })
		defer disarm()
		select {
		case <-fired:
			t.Fatal("fired before the context ended")
		case <-time.After(2 * limit):
		}
		stopped := time.Now()
		cancel()
		select {
		case at := <-fired:
			if at.Sub(stopped) < limit {
				t.Errorf("fired %s after the context ended, want at least %s", at.Sub(stopped), limit)
			}
		case <-time.After(time.Second):
			t.Fatal("never fired")
		}
	})
	t.Run("disarmed before or after the context ends", func(t *testing.T) {
		for _, endFirst := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			fired := make(chan struct{}, 1)
			disarm := Watchdog(ctx, limit, func() { fired <- struct{}{} })
			if endFirst {
				cancel()
			}
			disarm()
			cancel()
			select {
			case <-fired:
				t.Errorf("fired after disarm (context ended first: %v)", endFirst)
			case <-time.After(3 * limit):
			}
		}
	})
}
