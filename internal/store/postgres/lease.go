package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
)

// The repair lease is one row of repair_lease. A repair (reconcile
// --repair or --delete-orphans) takes it with a new token and an expiry it
// renews while it runs. Every relational write of the repair checks, in
// its own transaction, that the lease is still its own; every relational
// write of run reads the row FOR SHARE and waits while a repair holds it.
// The repair's UPDATE of the row waits for the writes of run holding it,
// so a repair starts once the writes in flight are committed, and the
// relational copy it reads does not change under it. Unlike a session's
// advisory lock, the lease lives in the row, not in a connection: a dropped
// connection or a transaction-mode pooler cannot end it unnoticed, and the
// lease of a repair that died ends when it expires.
//
// The index and the graph cannot read the row in their writes, so the
// repair also knows by itself until when its lease holds: validUntil, the
// time it sent its last successful take or renewal plus the TTL.
// PostgreSQL sets expires_at to its now() plus the TTL, and its now() is
// read after the request arrived, so validUntil is never later than
// expires_at. A renewal succeeds only while the lease has not expired, so
// the lease has held without a break up to validUntil. A repair writes a
// store only up to a margin before validUntil (WriteDeadline): see
// leaseMargin for what the margin covers.

const (
	takeLease = `
UPDATE repair_lease SET token = token + 1, holder = $1, expires_at = now() + make_interval(secs => $2)
WHERE expires_at IS NULL OR expires_at <= now()
RETURNING token`
	renewLease   = `UPDATE repair_lease SET expires_at = now() + make_interval(secs => $2) WHERE token = $1 AND expires_at > now()`
	releaseLease = `UPDATE repair_lease SET expires_at = NULL WHERE token = $1`
	// readLease is the first statement of every relational write.
	readLease  = `SELECT token, holder, coalesce(expires_at > now(), false) FROM repair_lease FOR SHARE`
	leaseState = `SELECT holder, coalesce(expires_at > now(), false) FROM repair_lease`
)

// LeaseLostError is a repair's write refused because its lease ended, or
// may have: it expired while the repair could not renew it, and another
// repair may have taken it since. The repair must stop; run it again.
type LeaseLostError struct {
	Token int64
	// Why says how the repair knows, when it found out by itself rather
	// than by PostgreSQL refusing a write.
	Why string
	// Err is the renewal's failure, when a renewal failed.
	Err error
}

func (e *LeaseLostError) Error() string {
	why := e.Why
	if why == "" {
		why = "it expired while it could not be renewed"
	}
	if e.Err != nil {
		why += ": " + e.Err.Error()
	}
	return fmt.Sprintf("the repair lease (token %d) was lost: %s; run the repair again", e.Token, why)
}

func (e *LeaseLostError) Unwrap() error { return e.Err }

// leaseMargin is how long before validUntil a repair's writes must have
// ended, a sixth of the TTL: 5 s of the default 30 s. It covers
//
//   - the rates of the two clocks: the repair measures the TTL on its
//     monotonic clock, PostgreSQL ends the lease by its wall clock. Each may
//     run up to 500 ppm off (NTP slews no faster), so the lease may end up
//     to 0.1% of the TTL early by the repair's clock: 30 ms of 30 s. A
//     PostgreSQL clock stepped forward ends the lease sooner still; run the
//     database host with a clock that slews rather than steps;
//   - a request that a store received just before the write's deadline and
//     applies after it: the deadline stops the repair from sending, not the
//     store from applying what it already has (a Qdrant upsert it queued, a
//     Neo4j COMMIT it is running). The rest of the margin, about 5 s at the
//     default TTL, is the time the repair allows a store for that; a store
//     that takes longer to apply a request it holds is not covered. Neo4j
//     also ends a transaction still open at the deadline (its timeout is
//     the deadline), but only at its next check of the timeouts, up to 2 s
//     later by default: a TTL under 12 s leaves less margin than that.
//
// The lease is renewed every third of the TTL, so while the renewals keep
// up a write starts with between half and five sixths of the TTL to run.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 6 }

// Lease is a repair's hold on the repair lease. Release ends it.
type Lease struct {
	s      *Store
	token  int64
	ttl    time.Duration
	faults Faults
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once

	// mu guards validUntil and lost: the renewal goroutine sets them, the
	// repair's writes read them.
	mu sync.Mutex
	// validUntil is the time the last successful take or renewal was sent,
	// plus the TTL: the lease holds at least until then.
	validUntil time.Time
	// lost, once set, says why the lease no longer holds: a renewal failed
	// or found it expired. It is never unset.
	lost *LeaseLostError
}

// Faults injects failures into the renewal of the lease (tests only).
type Faults interface {
	At(ctx context.Context, point string)
}

// LeaseConfig says how a repair holds the repair lease.
type LeaseConfig struct {
	// Holder names the repair to the repairs that wait for it.
	Holder string
	// TTL is how long the lease outlives its last renewal; it is renewed
	// every third of it.
	TTL time.Duration
	// Waiting, when set, is told the holder once while another repair
	// holds the lease.
	Waiting func(holder string)
	// Faults, when set, is told the point before each renewal,
	// before-repair-lease-renew (tests only).
	Faults Faults
}

// TakeRepairLease waits until no repair holds the lease, takes it as cfg
// says and renews it until Release. Writes through s carry the lease from
// then on.
func (s *Store) TakeRepairLease(ctx context.Context, cfg LeaseConfig) (*Lease, error) {
	told := false
	for {
		var token int64
		sent := time.Now()
		err := s.pool.QueryRow(ctx, takeLease, cfg.Holder, cfg.TTL.Seconds()).Scan(&token)
		if err == nil {
			l := &Lease{s: s, token: token, ttl: cfg.TTL, faults: cfg.Faults, stop: make(chan struct{}), done: make(chan struct{}),
				validUntil: sent.Add(cfg.TTL)}
			s.lease.Store(l)
			go l.renew()
			return l, nil
		}
		// A lock timeout is a wait too: run's writes in flight hold the
		// row (FOR SHARE) for longer than LockTimeout.
		if !errors.Is(err, pgx.ErrNoRows) && !lockTimedOut(err) {
			return nil, classify(fmt.Errorf("take the repair lease: %w", err))
		}
		if !told && cfg.Waiting != nil {
			var other string
			var held bool
			if err := s.pool.QueryRow(ctx, leaseState).Scan(&other, &held); err == nil && held {
				cfg.Waiting(other)
				told = true
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// WriteDeadline returns the time by which a write of the repair that
// starts now must have ended: leaseMargin before the lease could end. It
// fails with a *LeaseLostError once a renewal has failed or found the
// lease expired, or when that time has come, the renewals having stalled:
// the repair must then write nothing more, to any store.
func (l *Lease) WriteDeadline() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return time.Time{}, l.lost
	}
	deadline := l.validUntil.Add(-leaseMargin(l.ttl))
	if !time.Now().Before(deadline) {
		return time.Time{}, &LeaseLostError{Token: l.token, Why: fmt.Sprintf(
			"it was not renewed in time: it holds for %s after a renewal is sent, and a write must end %s before that", l.ttl, leaseMargin(l.ttl).Round(time.Millisecond))}
	}
	return deadline, nil
}

// renew keeps the lease from expiring until stop is closed; the lease's
// owner waits for done. A renewal that fails ends the renewals and makes
// WriteDeadline fail: whether the server took it is unknown, and a repair
// that cannot renew must stop rather than find out.
func (l *Lease) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if l.faults != nil {
			l.faults.At(context.Background(), "before-repair-lease-renew")
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		tag, err := l.s.pool.Exec(ctx, renewLease, l.token, l.ttl.Seconds())
		cancel()
		l.mu.Lock()
		switch {
		case err != nil:
			l.lost = &LeaseLostError{Token: l.token, Why: "its renewal failed", Err: classify(fmt.Errorf("renew the repair lease: %w", err))}
		case tag.RowsAffected() == 0:
			// Expired before this renewal: another repair may hold it now.
			l.lost = &LeaseLostError{Token: l.token, Why: "it had expired when it was renewed"}
		default:
			l.validUntil = sent.Add(l.ttl)
		}
		lost := l.lost != nil
		l.mu.Unlock()
		if lost {
			return
		}
	}
}

// leaseReleaseTimeout bounds Release's statement. A release that does not
// reach the server (a connection gone half-open) leaves the lease to
// expire by its TTL, which run's writes wait out; the repair's process
// must still be able to end.
const leaseReleaseTimeout = 5 * time.Second

// Release ends the lease: run's writes go on at once.
func (l *Lease) Release(ctx context.Context) {
	l.closed.Do(func() {
		close(l.stop)
		<-l.done
		l.s.lease.CompareAndSwap(l, nil)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseReleaseTimeout)
		defer cancel()
		_, _ = l.s.pool.Exec(ctx, releaseLease, l.token)
	})
}

// checkLease reads the lease row, first in a write's transaction: a
// repair's write must still hold it (else a *LeaseLostError), and run's
// must find it free (else a *project.WaitError: it is written again once
// the repair ends).
func (s *Store) checkLease(row pgx.Row) error {
	var (
		token  int64
		holder string
		held   bool
	)
	if err := row.Scan(&token, &holder, &held); err != nil {
		return err
	}
	if l := s.lease.Load(); l != nil {
		if !held || token != l.token {
			return &project.StoreError{Store: project.StoreRelational, Kind: project.Fatal, Err: &LeaseLostError{Token: l.token}}
		}
		return nil
	}
	if held {
		return &project.WaitError{Store: project.StoreRelational, Reason: "a repair holds the repair lease (" + holder + ")"}
	}
	return nil
}
