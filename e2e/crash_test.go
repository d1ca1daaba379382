package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/testenv"
)

// TestCrashSafety kills the real binary many times while it drains a
// stream: with SIGKILL at random moments, and with the test-only fault
// points that exit exactly between two store writes or pause there while
// the test kills it. After a last clean run the stores must equal the
// model, and every event must be in the ledger or the dead-letter topic.
func TestCrashSafety(t *testing.T) {
	events := testenv.Size(t, "E2E_CRASH_EVENTS", 2000, 0)
	kills := testenv.Size(t, "E2E_CRASH_KILLS", 20, 0)
	w := newWorld(t, 3)
	rng := rand.New(rand.NewPCG(3, 5))
	h := newHistory(w, rng, events/5)
	m := newModel()
	var recs []*kgo.Record
	var all []doc
	bad := 0
	for i := 0; i < events; i++ {
		if i%100 == 50 {
			recs = append(recs, &kgo.Record{Key: []byte(w.key(fmt.Sprintf("bad-%d", i))), Value: []byte(`{"version":`)})
			bad++
			continue
		}
		ev := h.next()
		m.apply(ev)
		all = append(all, ev)
		recs = append(recs, ev.record())
	}
	w.produce(recs...)

	points := []string{"before-index", "after-index", "after-graph", "after-relational"}
	injected := 0
	// Static membership hands the partitions straight back to the
	// restarted process instead of waiting for the dead one's session.
	common := []string{"--batch-records", "15", "--max-poll-records", "60", "--group-instance-id", "crash-test"}
	for i := 0; i < kills; i++ {
		var p *proc
		switch i % 3 {
		case 0: // exit at a fault point, between two store writes; each in turn
			point := points[(i/3)%len(points)]
			p = w.start([]string{"PROJECTOR_FAULTS=" + point + "=exit:0.5"}, common...)
		case 1: // pause between graph and relational, and kill during the pause
			p = w.start([]string{"PROJECTOR_FAULTS=after-graph=pause:400ms"}, common...)
		default: // plain SIGKILL at a random moment
			p = w.start(nil, common...)
		}
		select {
		case <-p.done:
		case <-time.After(time.Duration(300+rng.IntN(2500)) * time.Millisecond):
			p.kill()
		}
		if strings.Contains(p.log.String(), "fault: injected crash") {
			injected++
		}
		if p.err == nil {
			t.Fatalf("run %d ended by itself with status 0; want a crash", i)
		}
	}
	t.Logf("%d kills, %d of them injected crashes at fault points", kills, injected)
	if kills >= 6 && injected == 0 {
		t.Errorf("no fault point fired in %d runs; the crash windows between stores were not exercised", kills)
	}

	p := w.start(nil, common...)
	w.waitDrained(p, 5*time.Minute)
	p.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
	w.checkEveryEventAccounted(all, bad)
}

// checkEveryEventAccounted requires every event to be either in the ledger
// (it was applied) or in the dead-letter topic; only stale events may be in
// neither, as the contract says.
func (w *world) checkEveryEventAccounted(all []doc, bad int) {
	w.t.Helper()
	ctx := context.Background()
	rows, err := w.pg.Query(ctx, "SELECT idempotency_key FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize())
	if err != nil {
		w.t.Fatal(err)
	}
	ledgerKeys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	inLedger := map[string]bool{}
	for _, k := range ledgerKeys {
		inLedger[k] = true
	}
	// Dead letters may repeat after a crash (at-least-once); count each
	// source offset once.
	dead := map[string]bool{}
	for _, l := range w.deadLetters() {
		dead[header(l, dlq.HeaderSourcePartition)+"/"+header(l, dlq.HeaderSourceOffset)] = true
	}
	replay := newModel()
	conflicts := 0
	for _, d := range all {
		outcome := replay.apply(d)
		switch outcome {
		case "stale":
			continue
		case "conflict":
			conflicts++
			continue
		}
		version, op := d.Version, keys.OpUpsert
		if d.Withdraw || d.Tombstone {
			op = keys.OpWithdraw
		}
		if d.Tombstone {
			version = replay.docs[d.Key].version
		}
		if key := keys.IdempotencyKey(d.Key, version, op); !inLedger[key] {
			w.t.Errorf("event %s (%s) is neither in the ledger nor dead-lettered", key, outcome)
		}
	}
	if len(dead) != bad+conflicts {
		w.t.Errorf("distinct dead letters = %d, want %d (%d bad records and %d conflicts)", len(dead), bad+conflicts, bad, conflicts)
	}
}

// TestCrashWithTombstoneAndRevival kills the service at each fault point
// while it writes batches that hold [tombstone, higher version] of the same
// documents; the batch is then delivered again. The stores must converge
// on the higher version: before tombstones were pinned to their position,
// the redelivered tombstone withdrew the revived documents.
func TestCrashWithTombstoneAndRevival(t *testing.T) {
	for _, point := range []string{"before-index", "after-index", "after-graph", "after-relational"} {
		t.Run(point, func(t *testing.T) {
			w := newWorld(t, 1)
			m := newModel()
			var first, second []*kgo.Record
			for i := range 5 {
				key := w.key(fmt.Sprintf("d%d", i))
				for _, d := range []doc{{Key: key, Version: 1, Chunks: []string{"one", "two"}}} {
					m.apply(d)
					first = append(first, d.record())
				}
				for _, d := range []doc{{Key: key, Tombstone: true}, {Key: key, Version: 2, Chunks: []string{"revived"}}} {
					m.apply(d)
					second = append(second, d.record())
				}
			}
			// Static membership hands the partition straight back to the
			// restarted process.
			args := []string{"--batch-records", "100", "--group-instance-id", "crash-test"}
			w.produce(first...)
			p := w.start(nil, args...)
			w.waitDrained(p, 2*time.Minute)
			p.stop()

			w.produce(second...)
			p = w.start([]string{"PROJECTOR_FAULTS=" + point + "=exit:1"}, args...)
			<-p.done
			if !strings.Contains(p.log.String(), "fault: injected crash at "+point) {
				t.Fatalf("the service did not crash at %s: %v", point, p.err)
			}
			p = w.start(nil, args...)
			w.waitDrained(p, 2*time.Minute)
			p.stop()
			w.committedEqualsEnd()
			w.checkStores(m)
		})
	}
}
