package e2e

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/testenv"
)

// TestRebalance runs two projectors in one group on six partitions, kills
// one mid-stream, starts a third later, and requires the exact final state
// and a ledger showing that each partition's offsets were written by one
// process at a time: per partition, each writer's offsets form one run,
// and runs do not overlap in time.
func TestRebalance(t *testing.T) {
	events := testenv.Size(t, "E2E_REBALANCE_EVENTS", 3000, 0)
	w := newWorld(t, 6)
	rng := rand.New(rand.NewPCG(13, 17))
	h := newHistory(w, rng, events/4)
	m := newModel()
	var recs []*kgo.Record
	for i := 0; i < events; i++ {
		ev := h.next()
		m.apply(ev)
		recs = append(recs, ev.record())
	}
	// Short sessions so the dead member's partitions move within seconds.
	args := []string{"--batch-records", "20", "--max-poll-records", "100", "--session-timeout", "6s"}
	produce := func(part []*kgo.Record) {
		for len(part) > 0 {
			n := min(len(part), 50)
			w.produce(part[:n]...)
			part = part[n:]
			time.Sleep(20 * time.Millisecond)
		}
	}

	a := w.start([]string{"PROJECTOR_FAULTS=after-graph=pause:20ms"}, append(args, "--instance-id", "writer-a")...)
	b := w.start([]string{"PROJECTOR_FAULTS=after-graph=pause:20ms"}, append(args, "--instance-id", "writer-b")...)
	third := len(recs) / 3
	produce(recs[:third])
	a.kill()
	produce(recs[third : 2*third])
	c := w.start(nil, append(args, "--instance-id", "writer-c")...)
	produce(recs[2*third:])
	w.waitDrained(c, 5*time.Minute)
	b.stop()
	c.stop()

	w.committedEqualsEnd()
	w.checkStores(m)
	w.checkSingleWriterPerPartition()
}

// checkSingleWriterPerPartition reads the ledger, which keeps the first
// projection of every event with its partition, offset, writer and time.
func (w *world) checkSingleWriterPerPartition() {
	w.t.Helper()
	rows, err := w.pg.Query(context.Background(),
		"SELECT source_partition, source_offset, writer, projected_at FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize()+" ORDER BY source_partition, source_offset")
	if err != nil {
		w.t.Fatal(err)
	}
	type entry struct {
		partition int32
		offset    int64
		writer    string
		at        time.Time
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		err := r.Scan(&e.partition, &e.offset, &e.writer, &e.at)
		return e, err
	})
	if err != nil {
		w.t.Fatal(err)
	}
	type span struct {
		first, last time.Time
	}
	writers := map[string]bool{}
	byPartition := map[int32][]entry{}
	for _, e := range entries {
		byPartition[e.partition] = append(byPartition[e.partition], e)
		writers[e.writer] = true
	}
	if len(writers) < 2 {
		w.t.Errorf("ledger names %d writers, want at least 2: the partitions never moved", len(writers))
	}
	for p, es := range byPartition {
		seen := map[string]bool{}
		spans := map[string]*span{}
		var order []string
		for i, e := range es {
			if i == 0 || es[i-1].writer != e.writer {
				if seen[e.writer] {
					w.t.Errorf("partition %d: writer %s comes back at offset %d after another writer; two writers interleaved", p, e.writer, e.offset)
				}
				seen[e.writer] = true
				order = append(order, e.writer)
				spans[e.writer] = &span{first: e.at}
			}
			spans[e.writer].last = e.at
		}
		sort.SliceStable(order, func(i, j int) bool { return spans[order[i]].first.Before(spans[order[j]].first) })
		for i := 1; i < len(order); i++ {
			prev, next := spans[order[i-1]], spans[order[i]]
			if next.first.Before(prev.last) {
				w.t.Errorf("partition %d: %s wrote from %s while %s wrote until %s", p, order[i], next.first, order[i-1], prev.last)
			}
		}
	}
}
