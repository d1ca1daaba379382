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
		ef      embedderFlags
		timeout time.Duration
	)
	fs := newFlagSet("migrate", "migrate [flags]", e)
	lf.register(fs)
	sf.register(fs)
	ef.register(fs)
	fs.DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for a store that does not answer yet")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if err := ef.resolve(fs, &sf.vectorDim, e.getenv); err != nil {
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
	if err := st.migrate(ctx, log, true, ef.generation()); err != nil {
		return err
	}
	live, _ := st.generations.Live()
	fmt.Fprintf(e.stdout, "Qdrant %s (alias %s), Neo4j constraints and PostgreSQL schema %s at version %d: ready\n",
		live, sf.qdrantCollection, sf.postgresSchema, postgres.SchemaVersion())
	return nil
}
