package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/testenv"
)

// withSettings returns the test DSN with extra key=value settings.
func withSettings(t *testing.T, settings ...string) string {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	for _, s := range settings {
		sep := "&"
		if !strings.Contains(dsn, "?") {
			sep = "?"
		}
		dsn += sep + s
	}
	return dsn
}

// openOn opens a second store on schema, of a DSN with settings.
func openOn(t *testing.T, schema string, settings ...string) *Store {
	t.Helper()
	s, err := Open(context.Background(), withSettings(t, settings...), schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// show returns the session's values of the bounds' parameters.
func show(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, b := range sessionBounds {
		var v string
		if err := s.pool.QueryRow(context.Background(), "SELECT current_setting($1)", b.name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out[b.name] = v
	}
	return out
}

// TestSessionBounds: every session starts with the bounds, and what the
// DSN sets, as a key or in its options, wins.
func TestSessionBounds(t *testing.T) {
	_, schema := openUnmigrated(t)
	for _, tc := range []struct {
		name     string
		settings []string
		want     map[string]string
	}{
		{"defaults", nil, map[string]string{
			"idle_in_transaction_session_timeout": "5s", "lock_timeout": "5s", "statement_timeout": "1min"}},
		{"keys of the DSN", []string{"lock_timeout=1500", "statement_timeout=0"}, map[string]string{
			"idle_in_transaction_session_timeout": "5s", "lock_timeout": "1500ms", "statement_timeout": "0"}},
		{"options of the DSN", []string{"options=" + strings.ReplaceAll(url.QueryEscape("-c idle_in_transaction_session_timeout=0 --statement-timeout=2s -cwork_mem=8MB"), "+", "%20")}, map[string]string{
			"idle_in_transaction_session_timeout": "0", "lock_timeout": "5s", "statement_timeout": "2s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openOn(t, schema, tc.settings...)
			got := show(t, s)
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("%s = %q, want %q", name, got[name], want)
				}
			}
		})
	}
	s := openOn(t, schema)
	if got := s.pool.Config().PingTimeout; got != pingTimeout {
		t.Errorf("pool ping timeout = %v, want %v", got, pingTimeout)
	}
	s = openOn(t, schema, "pool_ping_timeout=1s")
	if got := s.pool.Config().PingTimeout; got != time.Second {
		t.Errorf("pool ping timeout with pool_ping_timeout=1s = %v, want 1s", got)
	}
}

// TestFrozenWriterLetsTheNextOwnerIn freezes a writer inside its
// transaction, holding its partition's row FOR SHARE as every write does:
// the next owner's AcquireFence must get the token once the store ended
// the frozen session, within IdleInTransactionTimeout plus LockTimeout, and
// the frozen writer's commit must fail. Before the bounds, AcquireFence
// waited for ever.
func TestFrozenWriterLetsTheNextOwnerIn(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	_, tx := writeInFlight(t, s, 0)
	frozen := time.Now()
	// The new owner retries as the consumer does: a lock timeout is
	// transient.
	bound := IdleInTransactionTimeout + LockTimeout + time.Second
	actx, cancel := context.WithTimeout(ctx, 2*bound)
	defer cancel()
	var (
		newer project.Fence
		err   error
	)
	for {
		newer, _, err = s.AcquireFence(actx, "documents", 0, "member-b", time.Minute)
		if err == nil || !errors.Is(err, project.ErrLockTimeout) {
			break
		}
	}
	if err != nil {
		t.Fatalf("AcquireFence behind a frozen writer: %v", err)
	}
	if took := time.Since(frozen); took > bound || newer.Token != 2 {
		t.Errorf("AcquireFence behind a frozen writer took %s and gave token %d, want within %s and token 2", took, newer.Token, bound)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Error("the frozen writer's commit succeeded after its session was ended")
	}
}

// TestLockTimeoutIsNamed: a wait for a lock that lock_timeout ends is a
// transient error with project.ErrLockTimeout in its chain.
func TestLockTimeoutIsNamed(t *testing.T) {
	s, schema := openUnmigrated(t)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	writeInFlight(t, s, 0)
	next := openOn(t, schema, "lock_timeout=100")
	_, _, err := next.AcquireFence(ctx, "documents", 0, "member-b", time.Minute)
	if !errors.Is(err, project.ErrLockTimeout) || project.KindOf(err) != project.Transient {
		t.Fatalf("AcquireFence behind a held row = %v (kind %s), want a transient error with ErrLockTimeout", err, project.KindOf(err))
	}
	if !strings.Contains(err.Error(), "lock timeout") {
		t.Errorf("error %q does not keep the server's message", err)
	}
}

// writeInFlight starts a write of member-a to partition p of topic
// "documents" that has passed its fence check: its transaction, which the
// test ends (it is rolled back at the end of the test), holds the
// partition's row FOR SHARE.
func writeInFlight(t *testing.T, s *Store, p int32) (project.Fence, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	f, _, err := s.AcquireFence(ctx, "documents", p, "member-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if err := checkFence(f, tx.QueryRow(ctx, readFence, f.Topic, f.Partition)); err != nil {
		t.Fatalf("the old writer's check: %v", err)
	}
	return f, tx
}

// holdFor runs stmt in a transaction of s that it commits after d, in the
// background; it returns once stmt has run.
func holdFor(t *testing.T, s *Store, stmt string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	done := make(chan struct{})
	time.AfterFunc(d, func() {
		defer close(done)
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("commit the held transaction: %v", err)
		}
	})
	t.Cleanup(func() { <-done })
}

// TestLongStatementsAreNotBounded: a migration and the reconcile count may
// rightly take longer than StatementTimeout; here they wait for a lock
// longer than a DSN's statement_timeout of 10 ms, and succeed.
func TestLongStatementsAreNotBounded(t *testing.T) {
	s, schema := openUnmigrated(t)
	ctx := context.Background()
	short := openOn(t, schema, "statement_timeout=10")
	holdFor(t, s, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", migrationLock), 300*time.Millisecond)
	if err := short.Migrate(ctx); err != nil {
		t.Fatalf("Migrate waiting for another migration: %v", err)
	}
	holdFor(t, s, `LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE`, 300*time.Millisecond)
	if _, _, err := short.Count(ctx, ""); err != nil {
		t.Fatalf("Count waiting for a lock: %v", err)
	}
}

// TestRepairLeaseWaitsOutLockTimeouts: run's writes in flight hold the
// lease's row for longer than the repair's lock_timeout; the repair waits
// and takes the lease once they are done, instead of failing.
func TestRepairLeaseWaitsOutLockTimeouts(t *testing.T) {
	run, schema := openUnmigrated(t)
	ctx := context.Background()
	if err := run.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	repair := openOn(t, schema, "lock_timeout=100")
	holdFor(t, run, readLease, 500*time.Millisecond)
	l, err := repair.TakeRepairLease(ctx, LeaseConfig{Holder: "repair", TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("TakeRepairLease behind run's writes: %v", err)
	}
	l.Release(ctx)
}

func TestDSNSets(t *testing.T) {
	for _, tc := range []struct {
		params map[string]string
		want   bool
	}{
		{map[string]string{"lock_timeout": "1s"}, true},
		{map[string]string{"options": "-c lock_timeout=1s"}, true},
		{map[string]string{"options": "-clock_timeout=1s"}, true},
		{map[string]string{"options": "--lock-timeout=1s"}, true},
		{map[string]string{"options": "-c deadlock_timeout=1s"}, false},
		{map[string]string{"options": "-c statement_timeout=1s"}, false},
		{map[string]string{}, false},
	} {
		if got := dsnSets(tc.params, "lock_timeout"); got != tc.want {
			t.Errorf("dsnSets(%v, lock_timeout) = %v, want %v", tc.params, got, tc.want)
		}
	}
}
