package e2e

import (
	"testing"
	"time"
)

// TestStopWhileJoiningDeadGroup sends SIGTERM to a member that is joining
// a group whose other members were just killed: the coordinator holds the
// join until their sessions expire, and a stop must not wait for that. A
// pod gets 30 s (Kubernetes' default grace period) before SIGKILL.
func TestStopWhileJoiningDeadGroup(t *testing.T) {
	w := newWorld(t, 2)
	var dead []*proc
	for range 2 {
		p := w.start(nil, "--session-timeout", "45s")
		dead = append(dead, p)
	}
	for _, p := range dead {
		waitFor(t, time.Minute, "the first members to be ready", func() bool {
			code, _ := p.get("/readyz")
			return code == 200
		})
	}
	for _, p := range dead {
		p.kill()
	}
	p := w.start(nil, "--session-timeout", "45s")
	waitFor(t, 30*time.Second, "the new member to serve /healthz", func() bool {
		code, _ := p.get("/healthz")
		return code == 200
	})
	// Let it reach the join the coordinator holds.
	time.Sleep(3 * time.Second)
	if code, _ := p.get("/readyz"); code == 200 {
		t.Fatal("the new member joined at once; the coordinator did not hold its join, so this tests nothing")
	}
	p.terminate()
	if p.err != nil {
		t.Errorf("exited with %v after SIGTERM, want status 0", p.err)
	}
}
