// Package health collects the conditions that make the service not ready.
//
// Components report a problem when it starts and clear it when it ends; the
// HTTP /readyz handler lists what is open. Reporting the same problem again
// is cheap and changes nothing, so callers may report on every retry.
package health

import (
	"sort"
	"sync"
)

// Status is the set of open problems, keyed by component. It is safe for
// concurrent use.
type Status struct {
	mu       sync.Mutex
	problems map[string]string
}

// New returns a Status with no problems.
func New() *Status { return &Status{problems: map[string]string{}} }

// Fail records that component is not working, and why. It reports whether
// this opened a new problem (rather than repeating an open one), so the caller
// can log once per outage.
func (s *Status) Fail(component, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, open := s.problems[component]
	s.problems[component] = reason
	return !open
}

// Recover clears component's problem. It reports whether one was open.
func (s *Status) Recover(component string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, open := s.problems[component]
	delete(s.problems, component)
	return open
}

// Problems lists the open problems as "component: reason", sorted.
func (s *Status) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.problems))
	for c, r := range s.problems {
		out = append(out, c+": "+r)
	}
	sort.Strings(out)
	return out
}
