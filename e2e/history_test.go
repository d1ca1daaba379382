package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/testenv"
)

// history generates a random history of events for docs documents: new
// versions (growing and shrinking), redeliveries, old versions resent after
// newer ones, withdrawals (at the current or a higher version), tombstones,
// revivals and version conflicts. Each document's events keep their order;
// documents interleave.
type history struct {
	rng  *rand.Rand
	w    *world
	docs []*docHistory
	// pending holds events that next returns before drawing new ones.
	pending []pendingDoc
}

type pendingDoc struct {
	d  *docHistory
	ev doc
}

type docHistory struct {
	key     string
	maxSeen int64 // highest version generated for the document
	sent    []doc // everything generated, for redeliveries and resends
}

func newHistory(w *world, rng *rand.Rand, docs int) *history {
	h := &history{rng: rng, w: w}
	for i := 0; i < docs; i++ {
		h.docs = append(h.docs, &docHistory{key: w.key(fmt.Sprintf("h-%04d", i))})
	}
	return h
}

func (h *history) upsert(d *docHistory, version int64) doc {
	r := h.rng
	ev := doc{Key: d.key, Version: version, Title: fmt.Sprintf("%s v%d t%d", d.key, version, r.IntN(1000))}
	if r.IntN(6) == 0 {
		ev.UseText = true
		ev.Text = strings.Repeat(fmt.Sprintf("Words of version %d, take %d. ", version, r.IntN(100)), 10+r.IntN(150))
		return ev
	}
	for c := 0; c < r.IntN(7); c++ { // 0..6 chunks: documents grow and shrink
		ev.Chunks = append(ev.Chunks, fmt.Sprintf("v%d c%d %s", version, c, strings.Repeat("y", r.IntN(120))))
	}
	return ev
}

// records returns the records of the history's next n events, each
// applied to m in order.
func (h *history) records(m *model, n int) []*kgo.Record {
	recs := make([]*kgo.Record, 0, n)
	for range n {
		ev := h.next()
		m.apply(ev)
		recs = append(recs, ev.record())
	}
	return recs
}

// next returns the next event of a random document.
func (h *history) next() doc {
	if len(h.pending) > 0 {
		p := h.pending[0]
		h.pending = h.pending[1:]
		p.d.sent = append(p.d.sent, p.ev)
		return p.ev
	}
	r := h.rng
	d := h.docs[r.IntN(len(h.docs))]
	var ev doc
	switch n := r.IntN(100); {
	case len(d.sent) == 0 || n < 40:
		d.maxSeen += 1 + int64(r.IntN(2))
		ev = h.upsert(d, d.maxSeen)
	case n < 52:
		ev = d.sent[len(d.sent)-1] // redelivery of the last event
	case n < 64:
		ev = d.sent[r.IntN(len(d.sent))] // an older event resent
	case n < 72:
		ev = doc{Key: d.key, Version: d.maxSeen, Withdraw: true}
	case n < 75:
		d.maxSeen++
		ev = doc{Key: d.key, Version: d.maxSeen, Withdraw: true}
	case n < 79:
		ev = doc{Key: d.key, Tombstone: true}
	case n < 82:
		// A tombstone and its revival back to back, so they often share a
		// batch: read again after the revival, the tombstone must change
		// nothing.
		ev = doc{Key: d.key, Tombstone: true}
		d.maxSeen++
		h.pending = append(h.pending, pendingDoc{d, h.upsert(d, d.maxSeen)})
	case n < 90:
		ev = h.upsert(d, d.maxSeen) // same version, other content: a conflict unless it was withdrawn
	default:
		d.maxSeen += 2
		ev = h.upsert(d, d.maxSeen) // a revival when the document was withdrawn
	}
	d.sent = append(d.sent, ev)
	return ev
}

// TestModelHistories feeds random event histories through the real broker
// to the running service, in waves and with random batch sizes, and
// compares every store with the model. Seeds: E2E_MODEL_SEEDS (comma
// separated; odd seeds use --on-conflict overwrite).
func TestModelHistories(t *testing.T) {
	docs := testenv.Size(t, "E2E_MODEL_DOCS", 500, 0)
	events := testenv.Size(t, "E2E_MODEL_EVENTS", 3000, 0)
	seeds := []uint64{1, 2}
	if v := os.Getenv("E2E_MODEL_SEEDS"); v != "" {
		seeds = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("E2E_MODEL_SEEDS=%q: %v", v, err)
			}
			seeds = append(seeds, n)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runHistory(t, seed, docs, events)
		})
	}
}

func runHistory(t *testing.T, seed uint64, docs, events int) {
	defer func() {
		if t.Failed() {
			t.Logf("reproduce with: E2E_MODEL_SEEDS=%d E2E_MODEL_DOCS=%d E2E_MODEL_EVENTS=%d go test -run TestModelHistories ./e2e/", seed, docs, events)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	w := newWorld(t, 4)
	m := newModel()
	m.overwrite = seed%2 == 1
	policy := "dlq"
	if m.overwrite {
		policy = "overwrite"
	}
	h := newHistory(w, rng, docs)
	var all []doc
	for i := 0; i < events; i++ {
		ev := h.next()
		m.apply(ev)
		all = append(all, ev)
	}

	p := w.start(nil, "--on-conflict", policy, "--batch-records", strconv.Itoa(5+rng.IntN(60)), "--max-poll-records", strconv.Itoa(20+rng.IntN(200)))
	// Waves: the service reads while records arrive, so batch boundaries
	// fall everywhere.
	for rest := all; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(400))
		recs := make([]*kgo.Record, n)
		for i, ev := range rest[:n] {
			recs[i] = ev.record()
		}
		w.produce(recs...)
		rest = rest[n:]
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
	}
	w.waitDrained(p, 5*time.Minute)
	metrics := p.metrics()
	p.stop()

	w.checkStores(m)
	defer w.checkReplayConverges(policy)
	for _, outcome := range []string{"projected", "redelivered", "stale", "withdrawn", "conflict"} {
		got := metrics[`projector_records_total{outcome="`+outcome+`"}`]
		if got != float64(m.outcomes[outcome]) {
			t.Errorf("records with outcome %s = %v, want %d", outcome, got, m.outcomes[outcome])
		}
	}
	if got := metrics[`projector_records_total{outcome="dlq"}`]; got != 0 {
		t.Errorf("records with outcome dlq = %v, want 0 (every generated event is valid)", got)
	}
	letters := w.deadLetters()
	wantLetters := m.outcomes["conflict"]
	if m.overwrite {
		wantLetters = 0
	}
	if len(letters) != wantLetters {
		t.Fatalf("dead letters = %d, want %d (the conflicts under policy %s)", len(letters), wantLetters, policy)
	}
	for _, l := range letters {
		if reason := header(l, dlq.HeaderReason); reason != "version_conflict" {
			t.Errorf("dead letter reason = %q, want version_conflict", reason)
		}
		if !bytes.Contains(l.Value, l.Key) {
			t.Errorf("dead letter value %q does not carry its document key %q", l.Value, l.Key)
		}
	}
}

// checkReplayConverges replays the whole topic from the earliest offset and
// requires every store to be byte for byte what the first drain left: each
// event read again after the later events of its document, tombstones
// after revivals included, must change nothing.
func (w *world) checkReplayConverges(policy string) {
	w.t.Helper()
	if w.t.Failed() {
		return
	}
	before := w.snapshot()
	if stdout, stderr, code := w.replay("--to", "earliest", "--execute"); code != 0 {
		w.t.Fatalf("replay --to earliest = exit %d: %s%s", code, stdout, stderr)
	}
	p := w.start(nil, "--on-conflict", policy, "--batch-records", "40")
	w.waitDrained(p, 5*time.Minute)
	p.stop()
	requireSameSnapshot(w.t, w.snapshot(), before)
}
