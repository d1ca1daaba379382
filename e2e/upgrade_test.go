package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestUpgradeSteps walks the schema through the steps of docs/upgrading.md
// with the real binary: `projector migrate` prepares the stores, a member
// started with --migrate=false refuses a schema it would have to migrate,
// and after a rollback, a build older than the schema refuses to run.
func TestUpgradeSteps(t *testing.T) {
	w := newWorld(t, 1)

	// Not migrated yet: a member that may not migrate says what to do.
	p := w.start(nil, "--migrate=false")
	w.requireExit(p, 1, "older than this build's", "projector migrate")

	migrate := exec.Command(bin, "migrate", "--qdrant-collection", w.collection, "--postgres-schema", w.schema)
	migrate.Env = os.Environ()
	out, err := migrate.CombinedOutput()
	if err != nil {
		t.Fatalf("projector migrate: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "schema "+w.schema+" at version") {
		t.Errorf("projector migrate printed %q, want the schema and its version", out)
	}
	p = w.start(nil, "--migrate=false")
	waitFor(t, time.Minute, "the member to be ready on the migrated schema", func() bool {
		code, _ := p.get("/readyz")
		return code == 200 || p.exited()
	})
	p.stop()

	// A newer build migrated the schema one step further, then was rolled
	// back: this build must not write it, with or without --migrate.
	if _, err := w.pg.Exec(t.Context(), "INSERT INTO "+pgx.Identifier{w.schema, "schema_migrations"}.Sanitize()+
		" (version) SELECT max(version) + 1 FROM "+pgx.Identifier{w.schema, "schema_migrations"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, migrateFlag := range []string{"--migrate=true", "--migrate=false"} {
		w.requireExit(w.start(nil, migrateFlag), 1, "newer than this build's", "docs/upgrading.md")
	}
}

// requireExit waits for p to exit by itself with code, its last line
// saying each of want.
func (w *world) requireExit(p *proc, code int, want ...string) {
	w.t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		w.t.Fatalf("the service still runs a minute after start; want it to stop with status %d", code)
	}
	exit, ok := p.err.(*exec.ExitError)
	if !ok || exit.ExitCode() != code {
		w.t.Fatalf("the service ended with %v, want exit status %d:\n%s", p.err, code, tail(p.log.String(), 10))
	}
	lines := scanLines(p.log.String())
	last := lines[len(lines)-1]
	for _, s := range want {
		if !strings.Contains(last, s) {
			w.t.Errorf("last line %q does not say %q", last, s)
		}
	}
}
