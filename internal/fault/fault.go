// Package fault injects failures at named points of the projection, for the
// crash and fence tests. It is compiled in only with the build tag
// "faults" (go build -tags faults); a normal build has no way to enable it,
// whatever the environment says.
package fault

import "context"

// ExitCode is the status of an injected crash, so a test can tell it from
// a real failure.
const ExitCode = 86

// Injector holds the faults of one process. A nil *Injector injects nothing,
// so callers never need to check whether faults are enabled.
type Injector struct {
	points map[string]action
	// dropIndex makes the index skip writes of documents whose key contains
	// it, so fences see a store that does not hold what was written.
	dropIndex string
	exit      func(code int)
}

// At is called when the projection passes point; it may exit the process
// (a crash at that exact line) or pause.
func (in *Injector) At(ctx context.Context, point string) {
	if in == nil {
		return
	}
	in.at(ctx, point)
}
