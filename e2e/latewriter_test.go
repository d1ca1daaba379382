package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// lateWriterCase is one interleaving TestLateWriterIsFenced forces.
type lateWriterCase struct {
	newer string
	// point is where the late member's batch waits: before its index
	// write, before its graph write (after-index) or before its relational
	// write (after-graph).
	point string
	// crashAfterIndex kills the late member right after its index write,
	// before any store could refuse it.
	crashAfterIndex bool
}

// TestLateWriterIsFenced forces the late write that fencing stops. Two
// members write one partition: the second was assigned it after the first,
// as after a handover the first did not notice (here: the first belongs
// to another consumer group, so nothing ever cancels its batch). The first
// member's batch of v1 is held at a store write (the fault await) until the
// second member has committed a newer event of the document; then it goes
// on with a live context. The graph and the relational store must refuse
// it in their transactions (the partition halts with reason fenced), and
// the late member removes what it wrote to the index; killed right after
// its index write instead, it leaves its points there when the newer event
// is a withdrawal (the index keeps no memory of one), which reconcile
// reports and --repair removes. Every store ends as the newer event left
// it. Before fencing tokens and log positions in every store, a late write
// after a withdrawal re-created the document in the graph, and a late
// write of an earlier same-version event put its chunks back.
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
		cases = append(cases, lateWriterCase{newer: n, point: "before-index", crashAfterIndex: true})
	}
	for i, tc := range cases {
		if i%testenv.Size(t, "E2E_LATE_WRITER_EVERY", 1, 1) != 0 {
			continue
		}
		name := tc.newer + "/held " + tc.point
		if tc.crashAfterIndex {
			name += " then killed after its index write"
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
			var args []string
			if m.overwrite {
				args = append(args, "--on-conflict", "overwrite")
			}

			release := filepath.Join(t.TempDir(), "release")
			faults := tc.point + "=await:" + release
			if tc.crashAfterIndex {
				faults += ",after-index=exit:1"
			}
			late := w.start([]string{"PROJECTOR_FAULTS=" + faults}, append(args, "--group", w.group+"-late")...)
			w.produce(v1.record())
			waitFor(t, time.Minute, "the late member to hold its write at "+tc.point, func() bool {
				return strings.Contains(late.log.String(), "fault: holding at "+tc.point)
			})
			w.produce(later.record())
			owner := w.start(nil, args...)
			w.waitDrained(owner, time.Minute)
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}

			if tc.crashAfterIndex {
				waitFor(t, time.Minute, "the late member to crash after its index write", late.exited)
				// Behind a newer version or a later event of its version,
				// the index's own write removed the late points again; a
				// withdrawal it has no memory of, so they stay for reconcile.
				leftover := tc.newer == "withdrawal" || tc.newer == "tombstone"
				r := w.reconcile("--repair")
				if got := hasIndexLeftover(r, w.prefix, "late"); got != leftover {
					t.Errorf("reconcile --repair found %v; want the late member's chunks in the index: %v", r.brief(w.prefix), leftover)
				}
			} else {
				waitFor(t, time.Minute, "the late member to halt the partition, fenced", func() bool {
					return late.metrics()[`projector_partition_halts_total{reason="fenced"}`] == 1
				})
				refused := 0.0
				for _, s := range []string{"graph", "relational"} {
					refused += late.metrics()[`projector_fenced_writes_total{store="`+s+`"}`]
				}
				if refused != 1 {
					t.Errorf("projector_fenced_writes_total of the graph and relational store sum to %v, want 1", refused)
				}
				if code, body := late.get("/readyz"); code != 503 || !strings.Contains(body, "fenced") && !strings.Contains(body, "newer writer") {
					t.Errorf("the late member's /readyz = %d %q, want 503 naming the newer writer", code, body)
				}
				late.stop()
			}
			owner.stop()
			w.committedEqualsEnd()
			w.checkStores(m)
		})
	}
}

// hasIndexLeftover reports whether reconcile found chunks of the document
// name in the index that the decision store does not hold.
func hasIndexLeftover(r reconciled, prefix, name string) bool {
	for _, line := range r.brief(prefix) {
		if strings.HasPrefix(line, "index ") && strings.Contains(line, " "+name+" ") {
			return true
		}
	}
	return false
}
