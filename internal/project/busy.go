package project

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// busy measures, per store, the time during which at least one call of
// this projector to it was in flight: how much of a run a store worked for
// the projector, and so how much it waited for it (the idle share
// `projector bench` reports). A fence reads the three stores at once, so it
// counts for each.
type busy struct {
	mu       sync.Mutex
	inFlight map[string]int
	since    map[string]time.Time
	seconds  *prometheus.CounterVec
}

func newBusy(reg prometheus.Registerer) *busy {
	b := &busy{inFlight: map[string]int{}, since: map[string]time.Time{},
		seconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_store_busy_seconds_total",
			Help: "Time during which at least one call of the projector to a store was in flight (writes, reads of the states, fences), added when the store's calls have all ended.",
		}, []string{"store"})}
	for _, s := range []string{StoreIndex, StoreGraph, StoreRelational} {
		b.seconds.WithLabelValues(s)
	}
	reg.MustRegister(b.seconds)
	return b
}

// storesOf are the stores a component's calls go to.
func storesOf(component string) []string {
	switch component {
	case StoreIndex, StoreGraph, StoreRelational:
		return []string{component}
	case "fence":
		return []string{StoreIndex, StoreGraph, StoreRelational}
	}
	return nil
}

// begin counts a call to the stores of component in flight; the function
// it returns counts it ended.
func (b *busy) begin(component string) func() {
	stores := storesOf(component)
	now := time.Now()
	b.mu.Lock()
	for _, s := range stores {
		if b.inFlight[s] == 0 {
			b.since[s] = now
		}
		b.inFlight[s]++
	}
	b.mu.Unlock()
	return func() {
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, s := range stores {
			if b.inFlight[s]--; b.inFlight[s] == 0 {
				b.seconds.WithLabelValues(s).Add(now.Sub(b.since[s]).Seconds())
			}
		}
	}
}
