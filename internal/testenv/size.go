package testenv

import (
	"os"
	"strconv"
	"testing"
)

// Size reads a suite's size from the environment variable name, so CI runs
// a bounded suite and a person a longer one (E2E_DOCUMENTS=5000 go test
// ./e2e/). It returns def when name is unset, and fails the test when the
// value is not a whole number of at least least.
func Size(t testing.TB, name string, def, least int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a whole number of at least %d", name, v, least)
	}
	return n
}
