package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
)

// The registry of index generations (table index_generations): every
// member reads the same rows, so they agree on which collections to write
// and which one readers search.

var _ generation.Registry = (*Store)(nil)

const selectGenerations = `SELECT generation, collection, embedder, model, embed_url, dim, distance, state
FROM index_generations ORDER BY generation`

// Generations returns every generation of the registry, by number.
func (s *Store) Generations(ctx context.Context) (generation.Set, error) {
	return generations(ctx, s.pool)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func generations(ctx context.Context, q querier) (generation.Set, error) {
	rows, err := q.Query(ctx, selectGenerations)
	if err != nil {
		return nil, classify(fmt.Errorf("read the index generations: %w", err))
	}
	var (
		out   generation.Set
		g     generation.Generation
		state string
	)
	targets := []any{&g.Number, &g.Collection, &g.Embedder.Kind, &g.Embedder.Model, &g.Embedder.URL, &g.Embedder.Dim, &g.Embedder.Distance, &state}
	_, err = pgx.ForEachRow(rows, targets, func() error {
		g.State = generation.State(state)
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("read the index generations: %w", err))
	}
	return out, nil
}

// RegisterFirst records g as the first generation unless the registry
// holds one already, and returns the registry: of members that bootstrap
// at once, the first one's insert wins and every one reads it back. It
// raises the generation set's epoch with the insert.
func (s *Store) RegisterFirst(ctx context.Context, g generation.Generation) (generation.Set, error) {
	var out generation.Set
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The set's row orders concurrent registrations: the second waits
		// for the first and then finds its row.
		if _, err := tx.Exec(ctx, `SELECT epoch FROM generation_set FOR UPDATE`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO index_generations (generation, collection, embedder, model, embed_url, dim, distance, state)
SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE NOT EXISTS (SELECT 1 FROM index_generations)`,
			g.Number, g.Collection, g.Embedder.Kind, g.Embedder.Model, g.Embedder.URL, g.Embedder.Dim, g.Embedder.Distance, string(g.State))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `UPDATE generation_set SET epoch = epoch + 1`); err != nil {
				return err
			}
		}
		out, err = generations(ctx, tx)
		return err
	})
	if err != nil {
		return nil, classify(fmt.Errorf("register the first index generation: %w", err))
	}
	return out, nil
}

// readGenerationEpoch reads the epoch of the set of generations run
// writes, holding the row against a change of the set until the write's
// transaction ends: a generation's start (which raises the epoch) waits
// for the writes in flight, and every write after it finds the new epoch.
const readGenerationEpoch = `SELECT epoch FROM generation_set FOR SHARE`

// GenerationSet returns the epoch of the set of generations run writes
// and the registry's generations. The epoch is read first: a change of
// the set commits its rows and its new epoch together, so a set read after
// the epoch is of that epoch or newer. A newer set under an older epoch
// only makes the relational store refuse the first write, which is then
// written again; the other way round, an older set under a newer epoch,
// would let a write that missed a new generation commit.
func (s *Store) GenerationSet(ctx context.Context) (int64, generation.Set, error) {
	var epoch int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM generation_set`).Scan(&epoch); err != nil {
		return 0, nil, classify(fmt.Errorf("read the index generations' epoch: %w", err))
	}
	set, err := s.Generations(ctx)
	return epoch, set, err
}

// checkGenerationEpoch scans the registry's epoch from row and returns a
// *project.GenerationsChangedError when it is not wrote, the epoch a
// write's index step wrote.
func checkGenerationEpoch(wrote int64, row pgx.Row) error {
	var now int64
	if err := row.Scan(&now); err != nil {
		return err
	}
	if now != wrote {
		return &project.GenerationsChangedError{Wrote: wrote, Now: now}
	}
	return nil
}
