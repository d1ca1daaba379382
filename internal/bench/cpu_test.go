package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCPUOfCountsChildren: a process's CPU includes what the processes it
// started spent, the ones that still run and the ones that ended, as
// PostgreSQL's backends do under their postmaster.
func TestCPUOfCountsChildren(t *testing.T) {
	// A shell that burns CPU in a child, which ends, then sleeps.
	parent := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'; sleep 30`)
	if err := parent.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
	var spent time.Duration
	for deadline := time.Now().Add(20 * time.Second); spent < 50*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		var err error
		if spent, err = cpuOf(parent.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpuOf = %s after the child's busy loop, want its CPU counted", spent)
		}
	}
}

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	postmaster := filepath.Join(dir, "postmaster.pid")
	if err := os.WriteFile(postmaster, []byte("25980\n/work/main/.services/postgres/data\n1764772800\n5432\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid, err := readPID(postmaster); err != nil || pid != 25980 {
		t.Errorf("readPID(postmaster.pid) = %d, %v; want 25980", pid, err)
	}
	if _, err := readPID(filepath.Join(dir, "missing.pid")); err == nil {
		t.Error("readPID of a missing file: no error")
	}
}
