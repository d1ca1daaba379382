package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// corpus generates n documents, a share of them in several versions and a
// share carrying text for the projector to split. Versions come in waves
// (every first version, then every second one...), so with small batches
// a document's versions land in different batches and older chunks must be
// removed from the stores, not just never written.
func corpus(w *world, rng *rand.Rand, n int) []doc {
	var out []doc
	versions := make([]int, n)
	for i := range versions {
		versions[i] = 1 + rng.IntN(3)
	}
	for v := 1; v <= 3; v++ {
		for i := 0; i < n; i++ {
			if v > versions[i] {
				continue
			}
			d := doc{Key: w.key(fmt.Sprintf("doc-%04d", i)), Version: int64(v), Title: fmt.Sprintf("Document %d version %d", i, v)}
			if i%5 == 0 {
				d.UseText = true
				d.Text = strings.Repeat(fmt.Sprintf("Sentence %d of document %d. ", v, i), 20+rng.IntN(200))
			} else {
				for c := 0; c < 1+rng.IntN(6); c++ {
					d.Chunks = append(d.Chunks, fmt.Sprintf("chunk %d of document %d at version %d: %s", c, i, v, strings.Repeat("x", rng.IntN(300))))
				}
			}
			out = append(out, d)
		}
	}
	return out
}

func lines(docs []doc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = string(d.value())
	}
	return out
}

// TestProjectAndRedeliver is the core promise: the stores hold exactly the
// current chunks after one run, and the same records delivered twice more
// leave every store byte-for-byte as it was.
func TestProjectAndRedeliver(t *testing.T) {
	w := newWorld(t, 3)
	docs := corpus(w, rand.New(rand.NewPCG(1, 2)), testenv.Size(t, "E2E_DOCUMENTS", 240, 0))
	m := newModel()
	for _, d := range docs {
		m.apply(d)
	}
	w.publishFile(lines(docs))

	p := w.start(nil, "--batch-records", "40")
	w.waitDrained(p, 3*time.Minute)
	metrics := p.metrics()
	p.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
	first := w.snapshot()

	for _, store := range []string{"index", "graph", "relational"} {
		checks := metrics[`projector_fence_checks_total{store="`+store+`"}`]
		mismatches := metrics[`projector_fence_mismatches_total{store="`+store+`"}`]
		if checks < float64(len(m.docs)) || mismatches != 0 {
			t.Errorf("fence %s: %v checks, %v mismatches; want >= %d checks and 0 mismatches", store, checks, mismatches, len(m.docs))
		}
	}
	if got := metrics[`projector_records_total{outcome="projected"}`]; got != float64(len(docs)) {
		t.Errorf("projected records = %v, want %d", got, len(docs))
	}

	// Redelivery: every record twice more.
	w.publishFile(lines(docs))
	w.publishFile(lines(docs))
	p = w.start(nil)
	w.waitDrained(p, 3*time.Minute)
	metrics = p.metrics()
	p.stop()
	w.committedEqualsEnd()
	requireSameSnapshot(t, w.snapshot(), first)
	redelivered := metrics[`projector_records_total{outcome="redelivered"}`]
	stale := metrics[`projector_records_total{outcome="stale"}`]
	if redelivered+stale != float64(2*len(docs)) || redelivered < float64(2*len(m.docs)) {
		t.Errorf("second run: %v redelivered + %v stale, want %d in all and at least %d redelivered", redelivered, stale, 2*len(docs), 2*len(m.docs))
	}
}
