package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/keys"
)

// TestRepairWhileRunning runs `reconcile --repair --delete-orphans` while
// `run` projects new versions of the documents it repairs. The repair reads
// the relational copy (version 1), then is held at a fault point until run
// has written version 2 to the index and the graph and waits for the
// repair lease before its relational write; when the repair writes on, no
// store may end older than the log. Before the repair lease and the
// stores' version guards, the repair wrote version 1 back over version 2
// behind committed offsets.
func TestRepairWhileRunning(t *testing.T) {
	w := newWorld(t, 2)
	m := newModel()
	var v1, v2 []*kgo.Record
	var keys []string
	for i := range 10 {
		key := w.key(fmt.Sprintf("r%d", i))
		keys = append(keys, key)
		for _, d := range []doc{{Key: key, Version: 1, Title: "one", Chunks: []string{"a", "b", "c"}}} {
			m.apply(d)
			v1 = append(v1, d.record())
		}
		for _, d := range []doc{{Key: key, Version: 2, Title: "two", Chunks: []string{"x"}}} {
			m.apply(d)
			v2 = append(v2, d.record())
		}
	}
	w.produce(v1...)
	p := w.start(nil, "--batch-records", "5")
	w.waitDrained(p, 2*time.Minute)

	// Lose the index's points of every document, so the repair re-projects
	// them all from the relational copy.
	_, err := w.qd.Delete(context.Background(), &qdrant.DeletePoints{
		CollectionName: w.collection, Wait: qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelectorFilter(&qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}),
	})
	if err != nil {
		t.Fatal(err)
	}

	release := filepath.Join(t.TempDir(), "release")
	r := w.startRepair("before-repair-write=await:"+release, "--repair", "--delete-orphans")
	r.waitHeld("before-repair-write")
	w.produce(v2...)
	waitForLeaseWait(t, p)
	touch(t, release)
	if err := <-r.done; err != nil {
		t.Fatalf("reconcile --repair: %v\n%s", err, r.out.String())
	}
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
}

// stalledLeaseTTL is the --repair-lease-ttl of the repairs that stall past
// their lease: long enough for the repair to reach its fault point and run
// to find the lease held, short enough not to keep the test waiting.
const stalledLeaseTTL = "5s"

// TestRepairStalledPastItsLeaseDeletesNothing is the scenario: a
// `reconcile --repair --delete-orphans` finds K in the index and the graph
// but not in PostgreSQL, because run's first write of K is on its way to
// the relational store, where it waits for the repair lease. Then the repair
// stalls, renewals and all, until its lease has expired and run has
// committed K behind passing fences. Woken, the repair must delete nothing
// and fail naming the lost lease. Before the repair checked its lease before
// every store write, it deleted K from the index and the graph after run had
// committed it, and exited 0.
func TestRepairStalledPastItsLeaseDeletesNothing(t *testing.T) {
	w := newWorld(t, 1)
	m := newModel()
	k := doc{Key: w.key("k"), Version: 1, Title: "one", Chunks: []string{"a", "b"}}
	m.apply(k)
	dir := t.TempDir()
	runOn, release := filepath.Join(dir, "run-on"), filepath.Join(dir, "release")
	p := w.start([]string{"PROJECTOR_FAULTS=after-graph=await:" + runOn})
	w.produce(k.record())
	waitFor(t, time.Minute, "run to hold between its graph and relational writes of K", func() bool {
		return strings.Contains(p.log.String(), "fault: holding at after-graph")
	})

	r := w.stallRepair("before-repair-delete", release, "--repair", "--delete-orphans")
	touch(t, runOn)
	w.outliveLease(p, r, release, m)
}

// TestRepairStalledPastItsLeaseReinsertsNothing: a repair reads a document
// from the relational copy to re-project it into the index, which lost a
// point of it, and stalls before writing, renewals and all; meanwhile run
// withdraws the document and, once the lease has expired, commits the
// withdrawal. Woken, the repair must write nothing and fail naming the lost
// lease. Before it checked its lease before every store write, it put the
// withdrawn document's points back into the index (the graph's tombstone
// and the relational store's lease check refused the rest).
func TestRepairStalledPastItsLeaseReinsertsNothing(t *testing.T) {
	w := newWorld(t, 1)
	m := newModel()
	d := doc{Key: w.key("d"), Version: 1, Title: "one", Chunks: []string{"a", "b"}}
	m.apply(d)
	p := w.start(nil)
	w.produce(d.record())
	w.waitDrained(p, 2*time.Minute)
	w.deletePoint(keys.ChunkID(d.Key, 1, 0))

	release := filepath.Join(t.TempDir(), "release")
	r := w.stallRepair("before-repair-write", release, "--repair")
	withdraw := doc{Key: d.Key, Version: 2, Withdraw: true}
	m.apply(withdraw)
	w.produce(withdraw.record())
	w.outliveLease(p, r, release, m)
}

// stallRepair starts a repair with flags that stalls at the fault point,
// and its lease's renewals with it, until release exists: a repair process
// that stalls there. It returns once the repair is at point.
func (w *world) stallRepair(point, release string, flags ...string) *repairProc {
	w.t.Helper()
	stall := "=await:" + release
	r := w.startRepair(point+stall+",before-repair-lease-renew"+stall, append(flags, "--repair-lease-ttl", stalledLeaseTTL)...)
	r.waitHeld(point)
	return r
}

// outliveLease has run, whose relational write must be waiting for the
// stalled repair r's lease, commit once the lease has expired (after its
// fences), then wakes r: it must fail naming its lost lease, and leave the
// stores as m says once run has stopped.
func (w *world) outliveLease(p *proc, r *repairProc, release string, m *model) {
	w.t.Helper()
	waitForLeaseWait(w.t, p)
	w.waitDrained(p, 2*time.Minute)
	touch(w.t, release)
	r.requireLeaseLost()
	p.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
}

// repairProc is a `projector reconcile` running in the background.
type repairProc struct {
	t    *testing.T
	out  *syncBuffer
	done chan error
}

// startRepair starts `projector reconcile` on this world with extra flags
// and the faults given (fault.Env). A repair still running when the test
// ends, held at a fault point, is killed.
func (w *world) startRepair(faults string, extra ...string) *repairProc {
	w.t.Helper()
	cmd := exec.Command(bin, append(w.reconcileArgs(), extra...)...)
	cmd.Env = append(os.Environ(), "PROJECTOR_FAULTS="+faults)
	r := &repairProc{t: w.t, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		r.done <- cmd.Wait()
		close(exited)
	}()
	w.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if w.t.Failed() {
			w.t.Logf("reconcile output:\n%s", tail(r.out.String(), 80))
		}
	})
	return r
}

// waitHeld waits until the repair holds at a fault point.
func (r *repairProc) waitHeld(point string) {
	r.t.Helper()
	waitFor(r.t, time.Minute, "the repair to hold at "+point, func() bool {
		return strings.Contains(r.out.String(), "fault: holding at "+point)
	})
}

// requireLeaseLost waits for the repair to end and requires that it failed
// naming its lost lease.
func (r *repairProc) requireLeaseLost() {
	r.t.Helper()
	select {
	case err := <-r.done:
		if err == nil || !strings.Contains(r.out.String(), "was lost") {
			r.t.Errorf("the repair that outlived its lease exited with %v, want a failure naming the lost lease", err)
		}
	case <-time.After(time.Minute):
		r.t.Fatal("the repair did not end within a minute of its release")
	}
}

// waitForLeaseWait waits until run says that its relational write waits
// for the repair lease.
func waitForLeaseWait(t *testing.T, p *proc) {
	t.Helper()
	waitFor(t, time.Minute, "run to wait for the repair lease", func() bool {
		return strings.Contains(p.log.String(), "a repair holds the repair lease")
	})
}

// touch creates the file an await fault waits for.
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
