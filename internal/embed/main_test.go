package embed

import (
	"testing"

	"go.uber.org/goleak"
)

// Embed runs its requests in goroutines it waits for: goleak fails the run
// if one outlives its call. The HTTP client's idle keep-alive connections
// are meant to outlive calls and are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
