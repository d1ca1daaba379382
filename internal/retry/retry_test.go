package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	tests := []struct {
		attempt  int
		low, top time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, time.Second, 2 * time.Second},
		{60, time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		for range 100 {
			if got := p.Delay(tt.attempt); got < tt.low || got > tt.top {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tt.attempt, got, tt.low, tt.top)
			}
		}
	}
	if got := p.Slow(); got != p.Max {
		t.Errorf("Slow() = %s, want %s", got, p.Max)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep with an ended context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v, want nil", err)
	}
}
