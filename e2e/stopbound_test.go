package e2e

import (
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// TestStopWithHalfOpenStore strands one store at a time behind a proxy
// that passes no byte and resets nothing, while the projector writes a
// batch to it and pings it, and sends SIGTERM: the process must exit
// within the contract's 10 s, with status 0 (the orderly stop, not the
// watchdog), and a projector started again on the stores themselves
// brings them to the model's state. Before each store's close had a
// deadline, a relational store stranded so held the process in
// pgxpool.Pool.Close for as long as its health ping waited.
func TestStopWithHalfOpenStore(t *testing.T) {
	for _, tc := range []struct {
		store string
		// target is the store's address; flags point the projector at a
		// proxy in front of it instead.
		target func(t testing.TB) string
		flags  func(t testing.TB, proxy string) []string
	}{
		{"index", testenv.QdrantAddr, func(_ testing.TB, proxy string) []string { return []string{"--qdrant-addr", proxy} }},
		{"graph", neo4jAddr, func(_ testing.TB, proxy string) []string { return []string{"--neo4j-uri", "bolt://" + proxy} }},
		{"relational", postgresAddr, func(t testing.TB, proxy string) []string {
			return []string{"--postgres-dsn", postgresDSNVia(t, proxy)}
		}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			w := newWorld(t, 1)
			m := newModel()
			proxy := testenv.NewStallProxy(t, tc.target(t))
			// A short session, so that the projector started again does
			// not wait long for the group to drop this one: a stop whose
			// batch is cut short does not wait to leave the group.
			p := w.start(nil, append(tc.flags(t, proxy.Addr()), "--session-timeout", "6s")...)
			before := doc{Key: w.key("before"), Version: 1, Title: "before", Chunks: []string{"a", "b"}}
			m.apply(before)
			w.produce(before.record())
			w.waitDrained(p, time.Minute)

			proxy.Strand()
			stranded := doc{Key: w.key("stranded"), Version: 1, Title: "stranded", Chunks: []string{"c"}}
			m.apply(stranded)
			w.produce(stranded.record())
			waitFor(t, time.Minute, "the projector to wait on the stranded "+tc.store, func() bool {
				if proxy.Dropped() == 0 {
					return false
				}
				for _, age := range series(p.metrics(), "projector_oldest_uncommitted_age_seconds") {
					if age > 0 {
						return true
					}
				}
				return false
			})

			p.terminate()
			if p.err != nil {
				t.Errorf("exited with %v after SIGTERM, want status 0", p.err)
			}

			again := w.start(nil)
			w.waitDrained(again, time.Minute)
			again.stop()
			w.committedEqualsEnd()
			w.checkStores(m)
		})
	}
}

// TestStopWhenAStepHangs holds a batch at a store write deaf to its
// context (the fault await, never released), as a driver call that ignores
// its deadline would, and sends SIGTERM: the revoke waits for the batch and
// the Kafka client's close for the revoke, so the orderly stop cannot end;
// the watchdog must end the process within 10 s, with status 5 and the
// goroutines' stacks on stderr.
func TestStopWhenAStepHangs(t *testing.T) {
	w := newWorld(t, 1)
	never := filepath.Join(t.TempDir(), "never")
	p := w.start([]string{"PROJECTOR_FAULTS=before-index=await:" + never})
	w.produce(doc{Key: w.key("held"), Version: 1, Title: "held", Chunks: []string{"a"}}.record())
	waitFor(t, time.Minute, "the batch to hold before its index write", func() bool {
		return strings.Contains(p.log.String(), "fault: holding at before-index")
	})
	p.terminate()
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.ExitCode() != 5 {
		t.Errorf("exited with %v, want status 5 (the watchdog)", p.err)
	}
	if out := p.log.String(); !strings.Contains(out, "after the stop signal; exiting with status 5") || !strings.Contains(out, "goroutine profile") {
		t.Errorf("stderr does not say why it exited and what still ran:\n%s", tail(out, 20))
	}
}

// terminate sends SIGTERM and waits for the process to exit, failing the
// test unless it does within the contract's 10 s.
func (p *proc) terminate() {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("still running 30 s after SIGTERM")
	}
	took := time.Since(start).Round(100 * time.Millisecond)
	p.t.Logf("exited %s after SIGTERM", took)
	if took > 10*time.Second {
		p.t.Errorf("exited %s after SIGTERM, want within 10 s", took)
	}
}

// neo4jAddr is the host:port of the test Neo4j's Bolt URI.
func neo4jAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(testenv.Neo4jURI(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// postgresAddr is the host:port of the test PostgreSQL DSN.
func postgresAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil || u.Host == "" {
		t.Fatalf("PROJECTOR_POSTGRES_DSN is not a URL with a host: %v", err)
	}
	return u.Host
}

// postgresDSNVia is the test PostgreSQL DSN with its host:port replaced by
// addr.
func postgresDSNVia(t testing.TB, addr string) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(fmt.Errorf("PROJECTOR_POSTGRES_DSN: %w", err))
	}
	u.Host = addr
	return u.String()
}
