package postgres

import (
	"context"
	"errors"
	"net/url"
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
// taken by another repair has its writes refused, in their transaction:
// its re-projections and its deletions of unknown documents.
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
	if err := first.DeleteDocuments(ctx, []string{"ghost"}); !errors.As(err, &lost) || project.KindOf(err) != project.Fatal {
		t.Fatalf("DeleteDocuments of a repair whose lease was taken = %v, want a fatal LeaseLostError", err)
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

// stalledRenewals is a Faults that holds every renewal of the lease until
// the test ends, as a repair process that stalls would.
type stalledRenewals chan struct{}

func (s stalledRenewals) At(_ context.Context, point string) {
	if point == "before-repair-lease-renew" {
		<-s
	}
}

// waitForLeaseLost polls WriteDeadline until it fails, for at most twice
// the lease's TTL, and returns the error and when it came.
func waitForLeaseLost(t *testing.T, l *Lease) (*LeaseLostError, time.Time) {
	t.Helper()
	for end := time.Now().Add(2 * l.ttl); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := l.WriteDeadline(); err != nil {
			at := time.Now()
			lost, ok := errors.AsType[*LeaseLostError](err)
			if !ok {
				t.Fatalf("WriteDeadline = %v, want a LeaseLostError", err)
			}
			return lost, at
		}
	}
	t.Fatalf("WriteDeadline still succeeds %s after the lease was taken", 2*l.ttl)
	return nil, time.Time{}
}

// TestRepairLeaseBoundsItself stalls the renewals of a lease: the repair's
// own bound ends a margin after the take was sent plus the TTL, and when it
// does, PostgreSQL still holds the lease for the repair and still makes
// run's writes wait. So a repair that cannot renew stops writing while its
// lease still holds.
func TestRepairLeaseBoundsItself(t *testing.T) {
	repair, run := openPair(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	stall := make(stalledRenewals)
	before := time.Now()
	lease, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "stalled repair", TTL: ttl, Faults: stall})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer lease.Release(ctx)
	defer close(stall)

	deadline, err := lease.WriteDeadline()
	if err != nil {
		t.Fatalf("WriteDeadline of a lease just taken: %v", err)
	}
	earliest, latest := before.Add(ttl-leaseMargin(ttl)), after.Add(ttl-leaseMargin(ttl))
	if deadline.Before(earliest) || deadline.After(latest) {
		t.Errorf("write deadline %s after the take, want %s to %s: the TTL less the margin after the take was sent",
			deadline.Sub(before), earliest.Sub(before), latest.Sub(before))
	}
	_, failed := waitForLeaseLost(t, lease)
	if failed.Before(deadline) {
		t.Errorf("WriteDeadline failed %s before the deadline it gave", deadline.Sub(failed))
	}
	var held bool
	if err := repair.pool.QueryRow(ctx, `SELECT expires_at > now() FROM repair_lease`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Errorf("PostgreSQL had ended the lease when the repair's own bound ended, want the bound to end first")
	}
	if _, ok := errors.AsType[*project.WaitError](run.Apply(ctx, write("by-run"), nil)); !ok {
		t.Errorf("run's write when the repair's bound ended did not wait for the lease")
	}
}

// TestRepairLeaseRenewalFailureIsSeen breaks a renewal: the next
// WriteDeadline fails, before the bound of the last renewal has run out.
func TestRepairLeaseRenewalFailureIsSeen(t *testing.T) {
	tests := []struct {
		name string
		// spoil makes the next renewal fail, or find the lease expired.
		spoil     func(t *testing.T, repair, other *Store)
		wantCause bool
	}{
		{
			name: "the renewal times out",
			spoil: func(t *testing.T, repair, _ *Store) {
				// The renewal waits for this lock until its timeout.
				tx, err := repair.pool.Begin(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
				if _, err := tx.Exec(context.Background(), `SELECT 1 FROM repair_lease FOR UPDATE`); err != nil {
					t.Fatal(err)
				}
			},
			wantCause: true,
		},
		{
			name: "the lease expired and another repair took it",
			spoil: func(t *testing.T, repair, other *Store) {
				ctx := context.Background()
				if _, err := repair.pool.Exec(ctx, `UPDATE repair_lease SET expires_at = now() - interval '1 second'`); err != nil {
					t.Fatal(err)
				}
				l, err := other.TakeRepairLease(ctx, LeaseConfig{Holder: "other", TTL: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Release(ctx) })
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repair, other := openPair(t)
			ctx := context.Background()
			lease, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "repair", TTL: 6 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// Released after spoil's clean-up, which frees the row.
			t.Cleanup(func() { lease.Release(ctx) })
			deadline, err := lease.WriteDeadline()
			if err != nil {
				t.Fatal(err)
			}
			tt.spoil(t, repair, other)
			lost, at := waitForLeaseLost(t, lease)
			if !at.Before(deadline) {
				t.Errorf("WriteDeadline failed %s after the last renewal's deadline, want the renewal's failure seen before it", at.Sub(deadline))
			}
			if got := lost.Err != nil; got != tt.wantCause {
				t.Errorf("LeaseLostError %q carries the renewal's error: %v, want %v", lost, got, tt.wantCause)
			}
		})
	}
}

// TestRepairLeaseReleaseIsBounded: a repair whose connections to PostgreSQL
// went half-open still returns from Release, within its bound, leaving the
// lease to expire by its TTL, so the repair's process can end.
func TestRepairLeaseReleaseIsBounded(t *testing.T) {
	_, schema := openUnmigrated(t)
	dsn, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewStallProxy(t, dsn.Host)
	dsn.Host = proxy.Addr()
	ctx := context.Background()
	repair, err := Open(ctx, dsn.String(), schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := repair.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "stranded repair", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Strand()
	released := make(chan struct{})
	start := time.Now()
	go func() {
		lease.Release(ctx)
		close(released)
	}()
	select {
	case <-released:
		t.Logf("Release returned after %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(leaseReleaseTimeout + 20*time.Second):
		t.Fatalf("Release on a half-open connection has not returned after %s", time.Since(start).Round(time.Second))
	}
	if proxy.Dropped() == 0 {
		t.Error("Release sent nothing after the proxy was stranded: the test did not strand it")
	}
}
