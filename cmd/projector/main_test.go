package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestEveryCommandExits2OnUsageErrors requires status 2 for a usage error in every
// subcommand, whether the flag is unknown, its value malformed, or its
// environment variable malformed; a new subcommand is covered by being in
// commands().
func TestEveryCommandExits2OnUsageErrors(t *testing.T) {
	for _, c := range commands() {
		tests := []struct {
			name string
			args []string
			env  map[string]string
		}{
			{"unknown flag", []string{"--no-such-flag"}, nil},
			{"malformed log level", []string{"--log-level", "loud"}, nil},
			{"malformed variable", nil, map[string]string{"PROJECTOR_LOG_LEVEL": "loud"}},
		}
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				if tt.name != "unknown flag" && !hasFlag(t, c.name, "log-level") {
					t.Skip("no --log-level")
				}
				var stdout, stderr bytes.Buffer
				args := append([]string{c.name}, tt.args...)
				code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, func(k string) string { return tt.env[k] })
				if code != exitUsage {
					t.Errorf("projector %s: exit %d, want %d (stderr %q)", strings.Join(args, " "), code, exitUsage, stderr.String())
				}
			})
		}
	}
}

// hasFlag reports whether subcommand name has the flag, from its -h.
func hasFlag(t *testing.T, name, flag string) bool {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{name, "-h"}, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" }); code != 0 {
		t.Fatalf("projector %s -h: exit %d", name, code)
	}
	return strings.Contains(stderr.String(), "-"+flag+" ")
}
