package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

// openPair opens two stores on one fresh schema: a repair's and run's.
func openPair(t *testing.T) (repair, run *Store) {
	t.Helper()
	repair, schema := openUnmigrated(t)
	if err := repair.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	run, err := Open(context.Background(), testenv.PostgresDSN(t), schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Close)
	return repair, run
}

func write(key string) *project.Write {
	return &project.Write{Live: []project.Document{storetest.Doc(key, 1, "x")}}
}

// TestRepairLeaseHoldsRunsWrites: while a repair holds the lease, run's
// relational writes are asked to wait and the repair's own go in; once
// released, run's go in again. The lease lives in its row, so closing every
// connection of the repair does not end it.
func TestRepairLeaseHoldsRunsWrites(t *testing.T) {
	repair, run := openPair(t)
	ctx := context.Background()
	lease, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "test repair", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	repair.pool.Reset()
	var wait *project.WaitError
	if err := run.Apply(ctx, write("by-run"), nil); !errors.As(err, &wait) {
		t.Fatalf("run's Apply while a repair holds the lease = %v, want a WaitError", err)
	}
	if err := repair.Apply(ctx, write("by-repair"), nil); err != nil {
		t.Fatalf("the repair's Apply: %v", err)
	}
	lease.Release(ctx)
	if err := run.Apply(ctx, write("by-run"), nil); err != nil {
		t.Fatalf("run's Apply after the release: %v", err)
	}
}

// TestRepairLeaseLostIsNoticed: a repair whose lease expired and was
// taken by another repair has its writes refused, in their transaction.
func TestRepairLeaseLostIsNoticed(t *testing.T) {
	first, second := openPair(t)
	ctx := context.Background()
	lease, err := first.TakeRepairLease(ctx, LeaseConfig{Holder: "first", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if _, err := first.pool.Exec(ctx, `UPDATE repair_lease SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	other, err := second.TakeRepairLease(ctx, LeaseConfig{Holder: "second", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	var lost *LeaseLostError
	if err := first.Apply(ctx, write("late"), nil); !errors.As(err, &lost) || project.KindOf(err) != project.Fatal {
		t.Fatalf("Apply of a repair whose lease was taken = %v, want a fatal LeaseLostError", err)
	}
	if err := second.Apply(ctx, write("current"), nil); err != nil {
		t.Fatalf("Apply of the repair holding the lease: %v", err)
	}
}

// TestRepairLeaseWaitsForWritesInFlight forces the order the lease must
// keep: a write of run has read the lease free when a repair asks for it;
// the repair gets it only once that write has committed.
func TestRepairLeaseWaitsForWritesInFlight(t *testing.T) {
	repair, run := openPair(t)
	ctx := context.Background()
	tx, err := run.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := run.checkLease(tx.QueryRow(ctx, readLease)); err != nil {
		t.Fatalf("run's check of a free lease: %v", err)
	}
	taken := make(chan *Lease, 1)
	go func() {
		l, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "repair", TTL: 30 * time.Second})
		if err != nil {
			t.Errorf("TakeRepairLease: %v", err)
		}
		taken <- l
	}()
	waitForStatementWait(t, run, "UPDATE repair_lease")
	select {
	case <-taken:
		t.Fatal("the repair took the lease while a write of run was in flight")
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-taken
	if l == nil {
		t.FailNow()
	}
	l.Release(ctx)
}
