package main

import (
	"context"
	"fmt"
	"time"

	"github.com/projector/projector/internal/store/postgres"
)

// migrateCommand prepares the stores as run does at start, then exits: a
// step of its own in an upgrade (docs/upgrading.md), before the new build's
// members start, for deployments that run them with --migrate=false.
func migrateCommand(ctx context.Context, args []string, e env) error {
	var (
		lf      logFlags
		sf      storeFlags
		timeout time.Duration
	)
	fs := newFlagSet("migrate", "migrate [flags]", e)
	lf.register(fs)
	sf.register(fs)
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for a store that does not answer yet")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	log, err := lf.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer st.close(context.WithoutCancel(ctx))
	if err := st.migrate(ctx, log, true); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Qdrant collection %s, Neo4j constraints and PostgreSQL schema %s at version %d: ready\n",
		sf.qdrantCollection, sf.postgresSchema, postgres.SchemaVersion())
	return nil
}
