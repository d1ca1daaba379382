package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector/projector/internal/store/postgres"
)

// TestFrozenInsideRelationalTransaction freezes a member inside its
// relational transaction: its batch of v1 has run its statements, holding
// its partition's row of partition_writers FOR SHARE, and waits before
// COMMIT (the fault await), and the member is stopped there (SIGSTOP). The
// partition is then given to a second member (the first belongs to another
// consumer group, as in TestLateWriterIsFenced, so nothing else frees it),
// which must take the partition's fencing token and commit v1 and v2
// within the bound docs/operations.md states ("A member frozen inside its
// transaction"): the store ends the frozen session after
// idle_in_transaction_session_timeout, and an attempt that met the lock
// ends after lock_timeout and is retried. Thawed and released, the first
// member's commit fails on its ended session and its batch, written again,
// is refused: every store ends at v2. Before the sessions were bounded, the
// second member waited for the token for ever.
func TestFrozenInsideRelationalTransaction(t *testing.T) {
	w := newWorld(t, 1)
	m := newModel()
	key := w.key("frozen")
	v1 := doc{Key: key, Version: 1, Title: "one", Chunks: []string{"a", "b", "c"}}
	v2 := doc{Key: key, Version: 2, Title: "two", Chunks: []string{"x"}}
	m.apply(v1)
	m.apply(v2)

	release := filepath.Join(t.TempDir(), "release")
	frozen := w.start([]string{"PROJECTOR_FAULTS=" + postgres.BeforeCommit + "=await:" + release}, "--group", w.group+"-frozen")
	w.produce(v1.record())
	waitFor(t, time.Minute, "the first member to hold inside its relational transaction", func() bool {
		return strings.Contains(frozen.log.String(), "fault: holding at "+postgres.BeforeCommit)
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w.produce(v2.record())

	owner := w.start(nil)
	waitFor(t, time.Minute, "the second member to be assigned the partition", func() bool {
		return strings.Contains(owner.log.String(), `"partition assigned"`)
	})
	assigned := time.Now()
	// The documented bound, and a second for the batch and this test's
	// polling.
	bound := postgres.IdleInTransactionTimeout + postgres.LockTimeout + 2*time.Second
	w.waitDrained(owner, time.Minute)
	took := time.Since(assigned)
	t.Logf("the new owner committed the partition's records %s after its assignment", took.Round(100*time.Millisecond))
	if took > bound {
		t.Errorf("the new owner committed the partition's records %s after its assignment, want within %s", took.Round(100*time.Millisecond), bound)
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the thawed member to be refused, fenced", func() bool {
		return frozen.metrics()[`projector_partition_halts_total{reason="fenced"}`] == 1
	})
	frozen.stop()
	owner.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
}
