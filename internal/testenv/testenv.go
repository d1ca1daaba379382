// Package testenv finds the real services that integration tests run against.
//
// The services are named by the same PROJECTOR_* variables the service reads
// (scripts/services.sh env prints them). Outside CI a test whose service is
// missing is skipped with the command that starts it; in CI (CI=true) it fails,
// so a broken set-up can never pass as a run of skipped tests.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startHint is printed when a service is missing, so the reader knows the fix.
const startHint = "start the services with: scripts/services.sh up && eval \"$(scripts/services.sh env)\""

// InCI reports whether the tests run in CI, where missing services are failures.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Missing skips the test outside CI and fails it in CI, naming the service.
func Missing(t testing.TB, service, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s is required in CI: %s (%s)", service, why, startHint)
	}
	t.Skipf("%s not available: %s; %s", service, why, startHint)
}

// lookup returns the value of a PROJECTOR_* variable, or handles its absence.
func lookup(t testing.TB, service, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		Missing(t, service, name+" is not set")
	}
	return v
}

// Env returns the value of the environment variable name, which belongs
// to service, or handles its absence as a missing service. The secured
// endpoints of scripts/services.sh (PROJECTOR_SECURE_*) are read this way.
func Env(t testing.TB, service, name string) string {
	t.Helper()
	return lookup(t, service, name)
}

// reachable dials addr once with a short timeout and handles failure.
func reachable(t testing.TB, service, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		Missing(t, service, "cannot reach "+addr+": "+err.Error())
		return
	}
	_ = conn.Close()
}

// Brokers returns the Kafka bootstrap addresses (PROJECTOR_BROKERS).
func Brokers(t testing.TB) []string {
	t.Helper()
	v := lookup(t, "Kafka", "PROJECTOR_BROKERS")
	brokers := strings.Split(v, ",")
	reachable(t, "Kafka", brokers[0])
	return brokers
}

// PostgresDSN returns the PostgreSQL connection string (PROJECTOR_POSTGRES_DSN).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return lookup(t, "PostgreSQL", "PROJECTOR_POSTGRES_DSN")
}

// Neo4jURI returns the Bolt URI of Neo4j (PROJECTOR_NEO4J_URI).
func Neo4jURI(t testing.TB) string {
	t.Helper()
	v := lookup(t, "Neo4j", "PROJECTOR_NEO4J_URI")
	host := v
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	reachable(t, "Neo4j", host)
	return v
}

// QdrantAddr returns the gRPC address of Qdrant (PROJECTOR_QDRANT_ADDR).
func QdrantAddr(t testing.TB) string {
	t.Helper()
	v := lookup(t, "Qdrant", "PROJECTOR_QDRANT_ADDR")
	reachable(t, "Qdrant", v)
	return v
}

// MainWithBinary is a TestMain body for packages that test a command as a
// real process: it builds the command at pkg (a path relative to the test's
// package, with extra go build flags such as -tags), stores the binary's
// path in *bin, runs the tests, removes the binary and exits.
func MainWithBinary(m *testing.M, pkg string, bin *string, buildFlags ...string) {
	dir, err := os.MkdirTemp("", "projector-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, filepath.Base(pkg))
	args := append(append([]string{"build"}, buildFlags...), "-o", *bin, pkg)
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
