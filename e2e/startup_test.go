package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/testenv"
)

// TestStopWhileStarting stops the service while its start waits on each
// service in turn: a listener that accepts connections and never answers,
// then an address that refuses them, stands in for it, so the SIGTERM
// lands inside that service's call or its driver's retry loop. The
// service must exit with status 0 and report no error: an orchestrator
// that stops a pod during its start must not see a failure. (CI once saw
// exit 1 here, from a cancelled Qdrant call.)
func TestStopWhileStarting(t *testing.T) {
	w := newWorld(t, 1)
	servers := []struct{ how, addr string }{
		{"silent", testenv.SilentListener(t)},
		{"refusing connections", freeAddr(t)},
	}
	for _, srv := range servers {
		for _, c := range silentCases(srv.addr) {
			p := w.start(nil, c.args...)
			// Long enough for the start to reach the service and wait in
			// its call or between its retries, well short of any timeout.
			p.stopAfter(time.Second)
			if out := p.log.String(); strings.Contains(out, "projector run:") || strings.Contains(out, `"level":"error"`) {
				t.Errorf("stopped while waiting for %s, %s: the service reported an error:\n%s", c.name, srv.how, tail(out, 10))
			}
		}
	}
}

// TestStartWaitsForServices starts the service while each service in turn
// accepts connections and never answers. The start must neither hang
// silently nor give up: it logs once that it waits, naming the server,
// says so on /readyz, and keeps trying until it is stopped.
func TestStartWaitsForServices(t *testing.T) {
	w := newWorld(t, 1)
	silent := testenv.SilentListener(t)
	procs := map[string]*proc{}
	for _, c := range silentCases(silent) {
		procs[c.name] = w.start(nil, c.args...)
	}
	for _, c := range silentCases(silent) {
		p := procs[c.name]
		want := `"server":"` + c.name + `"`
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out := p.log.String()
			if strings.Contains(out, "not available yet; waiting") && strings.Contains(out, want) {
				break
			}
			if p.exited() {
				t.Fatalf("%s silent: the service exited instead of waiting: %v", c.name, p.err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s silent: no line saying the service waits for it within 90 s", c.name)
			}
		}
		if code, body := p.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "startup") {
			t.Errorf("%s silent: /readyz = %d %q, want 503 naming the startup", c.name, code, body)
		}
	}
	for _, c := range silentCases(silent) {
		p := procs[c.name]
		p.stop()
		if n := strings.Count(p.log.String(), "not available yet; waiting"); n != 1 {
			t.Errorf("%s silent: %d lines saying the service waits, want one for the whole wait", c.name, n)
		}
	}
}

// TestStartWaitsForKafka starts the service before any broker listens at
// its bootstrap address, then brings one up there: the service must wait,
// then join and project what was published meanwhile.
func TestStartWaitsForKafka(t *testing.T) {
	w := newWorld(t, 1)
	late := freeAddr(t)
	p := w.start(nil, "--brokers", late)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.log.String(), "Kafka not available yet; waiting"); time.Sleep(100 * time.Millisecond) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no line saying the service waits for Kafka (exited: %v, %v)", p.exited(), p.err)
		}
	}
	key := w.key("late-broker")
	w.publishFile([]string{`{"document_key":"` + key + `","version":1,"title":"t","text":"Published before the projector could reach a broker."}`})

	// The broker advertises its own address, so after the bootstrap
	// request through this forwarder the service talks to it directly.
	forward(t, late, strings.Split(w.brokers, ",")[0])
	w.waitDrained(p, 2*time.Minute)
	var n int
	err := w.pg.QueryRow(context.Background(),
		"SELECT count(*) FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+" WHERE document_key = $1", key).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("documents row for %q: %d, %v; want 1", key, n, err)
	}
	p.stop()
}

// silentCases point the service at a silent listener in place of one
// service each.
func silentCases(silent string) []struct {
	name string
	args []string
} {
	return []struct {
		name string
		args []string
	}{
		{"Qdrant", []string{"--qdrant-addr", silent}},
		{"Neo4j", []string{"--neo4j-uri", "bolt://" + silent}},
		{"PostgreSQL", []string{"--postgres-dsn", "postgres://projector@" + silent + "/projector?sslmode=disable"}},
		{"Kafka", []string{"--brokers", silent}},
	}
}

// forward listens on addr and copies every connection to and from target.
func forward(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}
