package main

import (
	"context"
	"fmt"

	"github.com/projector/projector/internal/buildinfo"
	"github.com/projector/projector/internal/store/postgres"
)

// versionCommand prints the build, the same that the start-up log line and
// projector_build_info report, and the PostgreSQL schema version it writes,
// which decides whether it may run against a schema (docs/upgrading.md);
// `projector --version` is the same.
func versionCommand(_ context.Context, args []string, e env) error {
	fs := newFlagSet("version", "version", e)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, buildinfo.Read())
	fmt.Fprintf(e.stdout, "PostgreSQL schema version %d\n", postgres.SchemaVersion())
	return nil
}
