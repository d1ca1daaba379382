package project

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBusyCountsOverlapsOnce: two calls to a store in flight at once count
// the time either was in flight, once; a fence counts for every store.
func TestBusyCountsOverlapsOnce(t *testing.T) {
	b := newBusy(prometheus.NewRegistry())
	before := time.Now()
	first := b.begin(StoreGraph)
	second := b.begin(StoreGraph)
	begun := time.Now()
	time.Sleep(10 * time.Millisecond)
	first()
	time.Sleep(10 * time.Millisecond)
	ending := time.Now()
	second()
	after := time.Now()
	got := testutil.ToFloat64(b.seconds.WithLabelValues(StoreGraph))
	if low, high := ending.Sub(begun).Seconds(), after.Sub(before).Seconds(); got < low || got > high {
		t.Errorf("graph busy %.4fs after two overlapping calls, want between %.4f and %.4f: from the first's start to the second's end, once", got, low, high)
	}
	fence := b.begin("fence")
	time.Sleep(time.Millisecond)
	fence()
	for _, s := range []string{StoreIndex, StoreRelational} {
		if testutil.ToFloat64(b.seconds.WithLabelValues(s)) == 0 {
			t.Errorf("%s busy is 0 after a fence", s)
		}
	}
}
