package reconcile

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: a run reads the
// stores of a page concurrently and must wait for every read, and the
// benchmark must close every client it opens.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
