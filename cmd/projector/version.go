package main

import (
	"context"
	"fmt"

	"github.com/projector/projector/internal/buildinfo"
)

// versionCommand prints the build, the same that the start-up log line and
// projector_build_info report; `projector --version` is the same.
func versionCommand(_ context.Context, args []string, e env) error {
	fs := newFlagSet("version", "version", e)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, buildinfo.Read())
	return nil
}
