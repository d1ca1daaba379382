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

// LeaseLostError is a repair's write refused because its lease ended: it
// expired while the repair could not renew it, and another repair may have
// taken it since. The repair must stop; run it again.
type LeaseLostError struct{ Token int64 }

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("the repair lease (token %d) was lost: it expired while it could not be renewed; run the repair again", e.Token)
}

// Lease is a repair's hold on the repair lease. Release ends it.
type Lease struct {
	s      *Store
	token  int64
	ttl    time.Duration
	faults Faults
	lost   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
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
		err := s.pool.QueryRow(ctx, takeLease, cfg.Holder, cfg.TTL.Seconds()).Scan(&token)
		if err == nil {
			l := &Lease{s: s, token: token, ttl: cfg.TTL, faults: cfg.Faults, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
			s.lease.Store(l)
			go l.renew()
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
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

// Lost is closed when the lease could not be renewed before it expired.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// renew keeps the lease from expiring until stop is closed; the lease's
// owner waits for done.
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
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		tag, err := l.s.pool.Exec(ctx, renewLease, l.token, l.ttl.Seconds())
		cancel()
		if err == nil && tag.RowsAffected() == 0 {
			// Expired before this renewal: another repair may hold it now.
			close(l.lost)
			return
		}
	}
}

// Release ends the lease: run's writes go on at once.
func (l *Lease) Release(ctx context.Context) {
	l.closed.Do(func() {
		close(l.stop)
		<-l.done
		l.s.lease.CompareAndSwap(l, nil)
		_, _ = l.s.pool.Exec(context.WithoutCancel(ctx), releaseLease, l.token)
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
