package qdrantcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: the stream of
// upserts the kill test sends, the waiters of the servers' processes and
// every client must end with their test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
