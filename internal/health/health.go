// Package health collects the conditions that make the service not ready.
//
// Components report a problem when it starts and clear it when it ends; the
// HTTP /readyz handler lists what is open. Reporting the same problem again
// is cheap and changes nothing, so callers may report on every retry.
package health

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Status is the set of open problems, keyed by component. It is safe for
// concurrent use.
type Status struct {
	mu       sync.Mutex
	problems map[string]string
	// live, when set, says whether the process is wedged (Live).
	live func() error
}

// SetLiveness makes Live ask check; the consumer sets it once it exists,
// after the HTTP server started.
func (s *Status) SetLiveness(check func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = check
}

// Live returns why the process should be restarted, or nil: unlike a
// problem, which readiness reports and which heals by itself, this is a
// state that only a restart is expected to end.
func (s *Status) Live() error {
	s.mu.Lock()
	check := s.live
	s.mu.Unlock()
	if check == nil {
		return nil
	}
	return check()
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

// Pinger is a dependency whose health is checked by asking it.
type Pinger interface {
	Name() string
	Ping(ctx context.Context) error
}

// Watch pings every pinger each interval until ctx ends, opening a problem
// named "<name> ping" while it does not answer, so readiness and its log
// lines follow a store's outage even when no batch is being written. It
// logs one line when a dependency stops answering and one when it is back.
func (s *Status) Watch(ctx context.Context, log *zap.Logger, interval time.Duration, pingers ...Pinger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, p := range pingers {
			pctx, cancel := context.WithTimeout(ctx, interval)
			err := p.Ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			component := p.Name() + " ping"
			if err != nil {
				if s.Fail(component, "does not answer: "+err.Error()) {
					log.Warn("dependency does not answer", zap.String("dependency", p.Name()), zap.Error(err))
				}
			} else if s.Recover(component) {
				log.Info("dependency answers again", zap.String("dependency", p.Name()))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Register exports projector_ready (1 when no problem is open, else 0) on
// reg, so alerts can use readiness without probing /readyz.
func (s *Status) Register(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "projector_ready",
		Help: "1 when the service is ready (group joined, every store answers, no partition halted), else 0.",
	}, func() float64 {
		if len(s.Problems()) == 0 {
			return 1
		}
		return 0
	}))
}
