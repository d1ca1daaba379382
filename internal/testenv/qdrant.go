package testenv

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Qdrant is a real Qdrant server that one test runs on ports and storage of
// its own, so that the test can stop, kill and restart it, with its data on
// disk, without touching the server the other tests share.
type Qdrant struct {
	t        testing.TB
	bin, dir string
	// HTTPPort and GRPCPort stay the same across restarts.
	HTTPPort, GRPCPort int
	// env are QDRANT__ settings of the test's, after the ports and paths.
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartQdrant starts a private Qdrant server from PROJECTOR_TEST_QDRANT_BIN
// (scripts/services.sh env prints it) and waits until it is ready. The test's
// clean-up stops it.
func StartQdrant(t testing.TB) *Qdrant {
	t.Helper()
	q := NewQdrant(t)
	q.Start()
	q.WaitReady(60 * time.Second)
	return q
}

// NewQdrant prepares a private Qdrant server, with the QDRANT__ variables
// of env on top of its ports and paths, without starting it. The test's
// clean-up stops it.
func NewQdrant(t testing.TB, env ...string) *Qdrant {
	t.Helper()
	bin := lookup(t, "Qdrant", "PROJECTOR_TEST_QDRANT_BIN")
	if _, err := os.Stat(bin); err != nil {
		Missing(t, "Qdrant", "no server at PROJECTOR_TEST_QDRANT_BIN: "+err.Error())
	}
	q := &Qdrant{t: t, bin: bin, dir: t.TempDir(), HTTPPort: freePort(t), GRPCPort: freePort(t), env: env}
	t.Cleanup(q.Stop)
	return q
}

// Storage is the server's storage directory.
func (q *Qdrant) Storage() string { return filepath.Join(q.dir, "storage") }

// Log is what the server wrote to its stdout and stderr.
func (q *Qdrant) Log() string {
	b, _ := os.ReadFile(filepath.Join(q.dir, "qdrant.log"))
	return string(b)
}

// Exited is closed when the process started last has ended.
func (q *Qdrant) Exited() <-chan struct{} { return q.exited }

// ExitCode is the exit status of the process started last, once Exited is
// closed.
func (q *Qdrant) ExitCode() int { return q.cmd.ProcessState.ExitCode() }

// freePort returns a port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the gRPC address, host:port, as the projector's --qdrant-addr takes it.
func (q *Qdrant) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(q.GRPCPort)) }

// Start launches the server on its ports and storage; it does not wait for
// it to be ready, so a test can act within the window in which Qdrant loads
// its collections with the port still closed.
func (q *Qdrant) Start() {
	q.t.Helper()
	logf, err := os.OpenFile(filepath.Join(q.dir, "qdrant.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		q.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(q.bin)
	cmd.Dir = q.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(),
		"QDRANT__SERVICE__HOST=127.0.0.1",
		"QDRANT__SERVICE__HTTP_PORT="+strconv.Itoa(q.HTTPPort),
		"QDRANT__SERVICE__GRPC_PORT="+strconv.Itoa(q.GRPCPort),
		"QDRANT__STORAGE__STORAGE_PATH="+q.Storage(),
		"QDRANT__STORAGE__SNAPSHOTS_PATH="+filepath.Join(q.dir, "snapshots"),
		"QDRANT__TELEMETRY_DISABLED=true",
	)
	cmd.Env = append(cmd.Env, q.env...)
	if err := cmd.Start(); err != nil {
		q.t.Fatalf("start Qdrant %s: %v", q.bin, err)
	}
	q.cmd, q.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(q.exited)
}

// WaitReady waits until /readyz answers 200, which Qdrant does once it has
// loaded the collections on disk.
func (q *Qdrant) WaitReady(timeout time.Duration) {
	q.t.Helper()
	q.waitReady(timeout, false)
}

// WaitReadyTLS is WaitReady for a server whose REST port serves TLS.
func (q *Qdrant) WaitReadyTLS(timeout time.Duration) {
	q.t.Helper()
	q.waitReady(timeout, true)
}

func (q *Qdrant) waitReady(timeout time.Duration, useTLS bool) {
	q.t.Helper()
	scheme, client := "http", &http.Client{Timeout: 2 * time.Second}
	if useTLS {
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a probe of a test's own server
	}
	url := fmt.Sprintf("%s://127.0.0.1:%d/readyz", scheme, q.HTTPPort)
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-q.exited:
			q.t.Fatalf("Qdrant exited before it was ready:\n%s", q.Log())
		default:
		}
		if time.Now().After(deadline) {
			q.t.Fatalf("Qdrant on %s not ready after %s: %v", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server with SIGTERM, as an orderly shutdown does, and waits
// for it to exit; it does nothing when the server is not running.
func (q *Qdrant) Stop() { q.signal(syscall.SIGTERM) }

// Kill ends the server with SIGKILL, as a crash does, and waits for it.
func (q *Qdrant) Kill() { q.signal(syscall.SIGKILL) }

func (q *Qdrant) signal(sig syscall.Signal) {
	if q.cmd == nil {
		return
	}
	select {
	case <-q.exited:
	default:
		_ = q.cmd.Process.Signal(sig)
		select {
		case <-q.exited:
		case <-time.After(30 * time.Second):
			_ = q.cmd.Process.Kill()
			<-q.exited
		}
	}
	q.cmd = nil
}
