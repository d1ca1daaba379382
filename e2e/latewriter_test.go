package e2e

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// lateWriterCase is one interleaving TestLateWriterIsFenced forces with
// real processes; internal/explore enumerates them all in one process.
type lateWriterCase struct {
	newer string
	// point is where the late member's batch waits: before its index
	// write (and the token check before it), before its graph write
	// (after-index) or before its relational write (after-graph).
	point string
	// lands holds the late member just after the token check of its index
	// write instead, lets its index write land after the owner's, and
	// kills it there, so that only the owner's settle can remove it.
	lands bool
}

// TestLateWriterIsFenced forces the late write that fencing stops. Two
// members write one partition: the second was assigned it after the first,
// as after a handover the first did not notice (here: the first belongs
// to another consumer group, so nothing ever cancels its batch). The first
// member's batch of v1 is held at a store write (the fault await) until the
// second member has committed a newer event of the document; then it goes
// on with a live context. The token check before its index write, the
// graph and the relational store must refuse it (the partition halts with
// reason fenced), and it writes nothing more. Held after that check
// instead, its index write lands after the owner's, and it is killed:
// the owner settles the index once the late window is over, with no
// operator action, and the removal shows in
// projector_index_settled_points_total. Every store ends as the newer
// event left it, with nothing for reconcile to find.
func TestLateWriterIsFenced(t *testing.T) {
	newer := map[string]func(key string) doc{
		"new version": func(key string) doc { return doc{Key: key, Version: 2, Title: "two", Chunks: []string{"x"}} },
		"withdrawal":  func(key string) doc { return doc{Key: key, Version: 1, Withdraw: true} },
		"tombstone":   func(key string) doc { return doc{Key: key, Tombstone: true} },
		// The same version with other content, under --on-conflict
		// overwrite: fewer chunks, so the late write's extra ordinal
		// would show.
		"same-version overwrite": func(key string) doc { return doc{Key: key, Version: 1, Title: "other", Chunks: []string{"p", "q"}} },
	}
	var cases []lateWriterCase
	for _, n := range []string{"new version", "withdrawal", "tombstone", "same-version overwrite"} {
		for _, point := range []string{"before-index", "after-index", "after-graph"} {
			cases = append(cases, lateWriterCase{newer: n, point: point})
		}
	}
	// A landed late write waits out the late window (twice the index write
	// timeout): two kinds, the others are the explorer's.
	cases = append(cases, lateWriterCase{newer: "new version", lands: true}, lateWriterCase{newer: "withdrawal", lands: true})
	for i, tc := range cases {
		if i%testenv.Size(t, "E2E_LATE_WRITER_EVERY", 1, 1) != 0 {
			continue
		}
		name := tc.newer + "/held " + tc.point
		if tc.lands {
			name = tc.newer + "/index write landed before a kill"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 1)
			m := newModel()
			m.overwrite = tc.newer == "same-version overwrite"
			key := w.key("late")
			v1 := doc{Key: key, Version: 1, Title: "one", Chunks: []string{"a", "b", "c"}}
			later := newer[tc.newer](key)
			m.apply(v1)
			m.apply(later)
			// The index write timeout must outlast the owner's start and
			// drain for a held write to land after it; the late window is
			// twice as long.
			args := []string{"--index-write-timeout", "10s"}
			if m.overwrite {
				args = append(args, "--on-conflict", "overwrite")
			}

			release := filepath.Join(t.TempDir(), "release")
			point := tc.point
			faults := point + "=await:" + release
			if tc.lands {
				point = "index-checked"
				faults = point + "=await:" + release + ",after-index=exit:1"
			}
			late := w.start([]string{"PROJECTOR_FAULTS=" + faults}, append(args, "--group", w.group+"-late")...)
			w.produce(v1.record())
			waitFor(t, time.Minute, "the late member to hold its write at "+point, func() bool {
				return strings.Contains(late.log.String(), "fault: holding at "+point)
			})
			w.produce(later.record())
			owner := w.start(nil, args...)
			w.waitDrained(owner, time.Minute)
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}

			if tc.lands {
				waitFor(t, time.Minute, "the late member to crash after its index write", late.exited)
				waitFor(t, time.Minute, "the owner to settle the index", func() bool {
					return owner.metrics()[`projector_index_settles_total{result="changed"}`] == 1
				})
				if got := owner.metrics()[`projector_index_settled_points_total{action="removed"}`]; got < 1 {
					t.Errorf("projector_index_settled_points_total{action=removed} = %v, want the late write's points counted", got)
				}
			} else {
				waitFor(t, time.Minute, "the late member to halt the partition, fenced", func() bool {
					return late.metrics()[`projector_partition_halts_total{reason="fenced"}`] == 1
				})
				refused := 0.0
				for _, s := range []string{"index", "graph", "relational"} {
					refused += late.metrics()[`projector_fenced_writes_total{store="`+s+`"}`]
				}
				if refused != 1 {
					t.Errorf("projector_fenced_writes_total of the three stores sum to %v, want 1", refused)
				}
				if code, body := late.get("/readyz"); code != 503 || !strings.Contains(body, "fenced") && !strings.Contains(body, "newer writer") {
					t.Errorf("the late member's /readyz = %d %q, want 503 naming the newer writer", code, body)
				}
				late.stop()
			}
			owner.stop()
			w.committedEqualsEnd()
			w.checkStores(m)
			if r := w.reconcile(); r.code != 0 {
				t.Errorf("reconcile after the owner's settle = exit %d, found %v; want nothing", r.code, r.brief(w.prefix))
			}
		})
	}
}

// TestFrozenMembers: three members write six partitions under a steady
// stream; again and again one of them is frozen (SIGSTOP) for longer than
// its session, so the group gives its partitions to the others while its
// batches hang mid-write, and then thawed (SIGCONT): it learns that it lost
// them, or a store refuses its stale fencing token, and it joins again.
// Every store ends exactly as the model says, and a replay of the whole
// log from the earliest offset leaves every store as it was.
func TestFrozenMembers(t *testing.T) {
	events := testenv.Size(t, "E2E_FREEZE_EVENTS", 1500, 0)
	freezes := testenv.Size(t, "E2E_FREEZES", 3, 0)
	w := newWorld(t, 6)
	rng := rand.New(rand.NewPCG(29, 31))
	h := newHistory(w, rng, events/5)
	m := newModel()
	recs := h.records(m, events)
	args := []string{"--batch-records", "20", "--max-poll-records", "100",
		"--session-timeout", "6s", "--rebalance-timeout", "6s", "--revoke-timeout", "2s"}
	var members []*proc
	for _, name := range []string{"a", "b", "c"} {
		members = append(members, w.start([]string{"PROJECTOR_FAULTS=after-index=pause:10ms,after-graph=pause:10ms"},
			append(args, "--instance-id", "frozen-"+name)...))
	}
	chunk := len(recs) / (freezes + 1)
	for i := range freezes {
		w.produce(recs[i*chunk : (i+1)*chunk]...)
		frozen := members[i%len(members)]
		if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The frozen member commits nothing: the log is drained only once
		// its session expired and the others took its partitions.
		waitFor(t, 2*time.Minute, "the others to drain the log while one member is frozen", func() bool {
			lag, err := w.lag()
			return err == nil && lag == 0
		})
		if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	w.produce(recs[freezes*chunk:]...)
	w.waitDrained(members[0], 5*time.Minute)
	for _, p := range members {
		p.stop()
	}
	w.committedEqualsEnd()
	w.checkStores(m)

	before := w.snapshot()
	if stdout, stderr, code := w.replay("--to", "earliest", "--execute"); code != 0 {
		t.Fatalf("replay --to earliest = exit %d: %s%s", code, stdout, stderr)
	}
	p := w.start(nil, args...)
	w.waitDrained(p, 5*time.Minute)
	p.stop()
	requireSameSnapshot(t, w.snapshot(), before)
}
