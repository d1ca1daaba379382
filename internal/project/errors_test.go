package project

import (
	"context"
	"errors"
	"testing"
)

// TestWithContextErr checks that a driver error keeps its text and chain,
// and says context.Canceled only once its context has ended.
func TestWithContextErr(t *testing.T) {
	driverErr := errors.New("rpc error: code = Canceled desc = context canceled")
	live := context.Background()
	if err := WithContextErr(live, driverErr); err != driverErr {
		t.Errorf("with a live context: %v, want the driver's error as it is", err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	err := WithContextErr(ended, driverErr)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, driverErr) || err.Error() != driverErr.Error() {
		t.Errorf("with an ended context: %v, want the driver's error, also context.Canceled", err)
	}
	if err := WithContextErr(ended, context.Canceled); err != context.Canceled {
		t.Errorf("context.Canceled with an ended context: %v, want it as it is", err)
	}
	if err := WithContextErr(ended, nil); err != nil {
		t.Errorf("nil with an ended context: %v, want nil", err)
	}
}
