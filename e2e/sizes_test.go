package e2e

import (
	"os"
	"strconv"
	"testing"
)

// size reads a suite size from the environment, so CI runs a bounded suite
// and a person can run a longer one: E2E_DOCUMENTS=5000 go test ./e2e/.
func size(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}
