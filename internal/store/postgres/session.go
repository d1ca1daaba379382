package postgres

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The bounds every session of the store starts with, so that no session of
// the projector holds a writer's lock for ever (docs/operations.md,
// "Timeouts"). A write's transaction holds its partition's row of
// partition_writers FOR SHARE (fence.go) and the repair lease's row
// (lease.go) until it ends; the partition's next owner takes its fencing
// token with an UPDATE of that row, which waits for it.
const (
	// IdleInTransactionTimeout ends the session of a writer that stops
	// inside its transaction (a process frozen, a VM paused, a network cut
	// between two statements), and with it the locks it holds. A write's
	// transaction is a few pipelined statements: its idle gaps are
	// milliseconds, so this never ends a writer that is still working.
	IdleInTransactionTimeout = 5 * time.Second
	// LockTimeout bounds each wait for a lock, so a session blocked behind
	// a frozen one (the next owner taking its token, a write behind a
	// migration) fails and is retried instead of waiting with it.
	LockTimeout = 5 * time.Second
	// StatementTimeout bounds a statement that runs on; its error is a
	// limit (docs/operations.md, "Store errors"). Migrations and the
	// reconcile count, which may rightly take longer, lift it (unbounded).
	StatementTimeout = 60 * time.Second
)

// unboundedStatements lifts StatementTimeout for the rest of a transaction.
const unboundedStatements = `SET LOCAL statement_timeout = 0`

// sessionBounds are the server parameters of the bounds above.
var sessionBounds = []struct {
	name  string
	value time.Duration
}{
	{"idle_in_transaction_session_timeout", IdleInTransactionTimeout},
	{"lock_timeout", LockTimeout},
	{"statement_timeout", StatementTimeout},
}

// Keepalives end a connection whose peer is gone (a host down, a network
// cut) instead of leaving its read waiting for ever: TCP keepalive probes
// an idle connection, and TCP_USER_TIMEOUT (Linux) drops one whose sent
// bytes stay unacknowledged. Neither notices a peer whose kernel still
// acknowledges but whose process is stuck; the contexts of the calls and a
// bounded Close do (cmd/projector).
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	userTimeout       = 30 * time.Second
	// pingTimeout bounds pgxpool's liveness ping of a connection it hands
	// out after a pause; without one, a ping on a dead connection holds
	// the connection, and Close with it, for up to a minute.
	pingTimeout = 5 * time.Second
)

// bound sets the session bounds, keepalives and ping timeout on cfg. What
// the DSN sets itself wins: a parameter of its own (lock_timeout=1s, 0 to
// turn it off), a -c in its options, pool_ping_timeout.
func bound(cfg *pgxpool.Config) {
	params := cfg.ConnConfig.RuntimeParams
	for _, b := range sessionBounds {
		if !dsnSets(params, b.name) {
			params[b.name] = strconv.FormatInt(b.value.Milliseconds(), 10)
		}
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = pingTimeout
	}
	// The connect timeout still bounds the dial: pgconn applies it to the
	// context of the whole connection attempt.
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control:         setUserTimeout(userTimeout),
	}
	cfg.ConnConfig.DialFunc = d.DialContext
}

// dsnSets reports whether the DSN set the server parameter name itself: as
// a key of its own, or in options as -c name=value or --name=value (where
// PostgreSQL also takes - for _).
func dsnSets(params map[string]string, name string) bool {
	if _, ok := params[name]; ok {
		return true
	}
	for _, f := range strings.Fields(params["options"]) {
		if rest, ok := strings.CutPrefix(f, "--"); ok {
			f = rest
		} else {
			f = strings.TrimPrefix(f, "-c")
		}
		if key, _, ok := strings.Cut(f, "="); ok && strings.ReplaceAll(key, "-", "_") == name {
			return true
		}
	}
	return false
}
