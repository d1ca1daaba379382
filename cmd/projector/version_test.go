package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projector/projector/internal/store/postgres"
)

// TestVersion builds the binary as an image build does, with the version
// and commit given to the linker, and asks it both ways.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "projector")
	pkg := "github.com/projector/projector/internal/buildinfo"
	out, err := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X "+pkg+".version=v9.8.7 -X "+pkg+".revision=0123abcd", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("projector %s: %v", args[0], err)
		}
		if got := string(out); !strings.HasPrefix(got, "projector v9.8.7 (commit 0123abcd, go1.") {
			t.Errorf("projector %s printed %q, want the linked version and commit and the Go version", args[0], got)
		}
		if want := fmt.Sprintf("\nPostgreSQL schema version %d\n", postgres.SchemaVersion()); !strings.HasSuffix(string(out), want) {
			t.Errorf("projector %s printed %q, want it to end with %q", args[0], out, want)
		}
	}
}

func TestVersionTakesNoArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"version", "extra"}, nil, &stdout, &stderr, func(string) string { return "" })
	if code != 2 {
		t.Errorf("projector version extra: exit %d, want 2 (stderr %q)", code, stderr.String())
	}
}
