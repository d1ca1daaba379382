package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	recs := h.records(m, events)
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
// projection of every event with its partition, offset, writer and time,
// and requires each partition's writers to follow one another in time:
// a writer that wrote again after another writer of the partition means
// two wrote it at once. It goes by time, not by offset: with two batches
// in flight, a member killed after committing the later batch's relational
// transaction but not the earlier one's leaves the later offsets to it and
// the earlier ones to the next owner.
func (w *world) checkSingleWriterPerPartition() {
	w.t.Helper()
	rows, err := w.pg.Query(context.Background(),
		"SELECT source_partition, source_offset, writer, projected_at FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize()+" ORDER BY source_partition, projected_at, source_offset")
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
		for i, e := range es {
			if i == 0 || es[i-1].writer != e.writer {
				if seen[e.writer] {
					w.t.Errorf("partition %d: writer %s writes again at %s (offset %d) after %s; two writers interleaved",
						p, e.writer, e.at, e.offset, es[i-1].writer)
				}
				seen[e.writer] = true
			}
		}
	}
}

// TestHeldWriteAfterLostSession holds a member's batch between its index
// and graph writes (the fault await), then freezes the member (SIGSTOP) for
// longer than its session, so the group gives its partition to a second
// member, which projects a newer event of the document: a new version, a
// withdrawal, a tombstone. Only once the second member has committed it is
// the held batch released and the first member thawed: its batch of the
// older version goes on until it learns it lost the partition (its batch
// is cancelled) or a store refuses its stale fencing token (it halts the
// partition). Either way it must not take any store back: every store ends
// as the newer event left it, and the committed offset is the end of the
// log. Before lost partitions were cancelled and store writes checked the
// version, the graph and the relational store ended at v1.
func TestHeldWriteAfterLostSession(t *testing.T) {
	for _, tt := range []struct {
		name  string
		newer func(key string) doc
	}{
		{"new version", func(key string) doc { return doc{Key: key, Version: 2, Title: "two", Chunks: []string{"x"}} }},
		{"withdrawal", func(key string) doc { return doc{Key: key, Version: 1, Withdraw: true} }},
		{"tombstone", func(key string) doc { return doc{Key: key, Tombstone: true} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, 1)
			m := newModel()
			key := w.key("held")
			v1 := doc{Key: key, Version: 1, Title: "one", Chunks: []string{"a", "b", "c"}}
			newer := tt.newer(key)
			m.apply(v1)
			m.apply(newer)
			args := []string{"--session-timeout", "6s", "--rebalance-timeout", "6s", "--revoke-timeout", "2s"}

			release := filepath.Join(t.TempDir(), "release")
			a := w.start([]string{"PROJECTOR_FAULTS=after-index=await:" + release}, args...)
			w.produce(v1.record())
			waitFor(t, time.Minute, "the first member to hold its write", func() bool {
				return strings.Contains(a.log.String(), "fault: holding at after-index")
			})
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			w.produce(newer.record())
			b := w.start(nil, args...)
			w.waitDrained(b, 2*time.Minute)
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// The thawed member learns that it lost the partition, or a
			// store refuses its batch first. It is killed then, before it
			// could read the newer event itself and so hide what its late
			// writes did.
			waitFor(t, time.Minute, "the first member to lose the partition or be refused", func() bool {
				out := a.log.String()
				return strings.Contains(out, `"partition lost"`) || strings.Contains(out, `"partition halted`)
			})
			a.kill()
			b.stop()
			w.committedEqualsEnd()
			w.checkStores(m)
		})
	}
}
