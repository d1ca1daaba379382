package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
)

// The registry of index generations (table index_generations): every
// member reads the same rows, so they agree on which collections to write
// and which one readers search.

var _ generation.Registry = (*Store)(nil)

const selectGenerations = `SELECT alias, generation, collection, embedder, model, embed_url, dim, distance, state,
	coalesce(fill_after, ''), fill_documents, fill_chunks, fill_done_at IS NOT NULL
FROM index_generations WHERE alias = $1 ORDER BY generation`

// Generations returns every generation of alias, by number.
func (s *Store) Generations(ctx context.Context, alias string) (generation.Set, error) {
	return generations(ctx, s.pool, alias)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func generations(ctx context.Context, q querier, alias string) (generation.Set, error) {
	rows, err := q.Query(ctx, selectGenerations, alias)
	if err != nil {
		return nil, classify(fmt.Errorf("read the index generations: %w", err))
	}
	var (
		out   generation.Set
		g     generation.Generation
		state string
	)
	targets := []any{&g.Alias, &g.Number, &g.Collection, &g.Embedder.Kind, &g.Embedder.Model, &g.Embedder.URL, &g.Embedder.Dim, &g.Embedder.Distance, &state,
		&g.Fill.After, &g.Fill.Documents, &g.Fill.Chunks, &g.Fill.Done}
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

// RegisterFirst records g as the first generation of g.Alias unless the
// registry holds one already, and returns the alias's generations: of
// members that bootstrap at once, the first one's insert wins and every
// one reads it back. It raises the epoch with the insert. The epoch is
// one for every alias: a change of one alias's set makes the members of
// the others read theirs again, and change nothing.
func (s *Store) RegisterFirst(ctx context.Context, g generation.Generation) (generation.Set, error) {
	var out generation.Set
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The set's row orders concurrent registrations: the second waits
		// for the first and then finds its row.
		if _, err := tx.Exec(ctx, `SELECT epoch FROM generation_set FOR UPDATE`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO index_generations (alias, generation, collection, embedder, model, embed_url, dim, distance, state)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE NOT EXISTS (SELECT 1 FROM index_generations WHERE alias = $1)`,
			g.Alias, g.Number, g.Collection, g.Embedder.Kind, g.Embedder.Model, g.Embedder.URL, g.Embedder.Dim, g.Embedder.Distance, string(g.State))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `UPDATE generation_set SET epoch = epoch + 1`); err != nil {
				return err
			}
		}
		out, err = generations(ctx, tx, g.Alias)
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
func (s *Store) GenerationSet(ctx context.Context, alias string) (int64, generation.Set, error) {
	var epoch int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM generation_set`).Scan(&epoch); err != nil {
		return 0, nil, classify(fmt.Errorf("read the index generations' epoch: %w", err))
	}
	set, err := s.Generations(ctx, alias)
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

// RegisterGeneration records g, a generation to build beside the live
// one, whose collection the caller has created, and raises the set's
// epoch: from its commit on, every relational write of run wrote g's index
// first. It waits for the relational writes in flight (they hold the
// set's row FOR SHARE). Registering the building generation again is a
// rerun and changes nothing; any other generation while one is building,
// or a number other than the next, is refused (*generation.ConflictError).
func (s *Store) RegisterGeneration(ctx context.Context, g generation.Generation) (generation.Set, error) {
	var out generation.Set
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT epoch FROM generation_set FOR UPDATE`); err != nil {
			return err
		}
		set, err := generations(ctx, tx, g.Alias)
		if err != nil {
			return err
		}
		if err := set.CanRegister(g); err != nil {
			if errors.Is(err, generation.ErrRegistered) {
				out = set
				return nil
			}
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO index_generations (alias, generation, collection, embedder, model, embed_url, dim, distance, state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			g.Alias, g.Number, g.Collection, g.Embedder.Kind, g.Embedder.Model, g.Embedder.URL, g.Embedder.Dim, g.Embedder.Distance, string(g.State)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE generation_set SET epoch = epoch + 1`); err != nil {
			return err
		}
		out, err = generations(ctx, tx, g.Alias)
		return err
	})
	if _, ok := errors.AsType[*generation.ConflictError](err); ok {
		return nil, err
	}
	if err != nil {
		return nil, classify(fmt.Errorf("register index generation %d: %w", g.Number, err))
	}
	return out, nil
}

var _ generation.FillStore = (*Store)(nil)

// TakeFill takes the fill lease of building generation n for ttl (on the
// server's clock) and returns its token and the progress recorded. It
// fails with a *generation.FillHeldError while another fill holds it.
func (s *Store) TakeFill(ctx context.Context, g generation.Generation, ttl time.Duration) (int64, generation.Progress, error) {
	n := g.Number
	var (
		token   int64
		p       generation.Progress
		state   string
		heldFor *float64
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT state, extract(epoch FROM fill_until - now())::float8 FROM index_generations WHERE alias = $2 AND generation = $1 FOR UPDATE`, n, g.Alias).
			Scan(&state, &heldFor)
		if errors.Is(err, pgx.ErrNoRows) {
			return &generation.ConflictError{Why: fmt.Sprintf("there is no generation %d", n)}
		}
		if err != nil {
			return err
		}
		if state != string(generation.Building) {
			return &generation.ConflictError{Why: fmt.Sprintf("generation %d is %s, not building", n, state)}
		}
		if heldFor != nil && *heldFor >= 0 {
			return &generation.FillHeldError{Generation: n, For: time.Duration(*heldFor * float64(time.Second))}
		}
		return tx.QueryRow(ctx, `UPDATE index_generations SET fill_token = fill_token + 1, fill_until = now() + make_interval(secs => $2)
WHERE alias = $3 AND generation = $1
RETURNING fill_token, coalesce(fill_after, ''), fill_documents, fill_chunks, fill_done_at IS NOT NULL`, n, ttl.Seconds(), g.Alias).
			Scan(&token, &p.After, &p.Documents, &p.Chunks, &p.Done)
	})
	if err == nil {
		return token, p, nil
	}
	_, conflict := errors.AsType[*generation.ConflictError](err)
	_, held := errors.AsType[*generation.FillHeldError](err)
	if conflict || held {
		return 0, generation.Progress{}, err
	}
	return 0, generation.Progress{}, classify(fmt.Errorf("take the fill lease of generation %d: %w", n, err))
}

// RenewFill records the fill's progress p and holds its lease ttl longer,
// if token still holds it and it has not expired; else it fails with a
// *generation.FillLostError.
func (s *Store) RenewFill(ctx context.Context, g generation.Generation, token int64, ttl time.Duration, p generation.Progress) error {
	n := g.Number
	tag, err := s.pool.Exec(ctx, `UPDATE index_generations SET fill_until = now() + make_interval(secs => $3),
	fill_after = $4, fill_documents = $5, fill_chunks = $6, fill_done_at = CASE WHEN $7 THEN coalesce(fill_done_at, now()) END
WHERE alias = $8 AND generation = $1 AND fill_token = $2 AND fill_until >= now() AND state = 'building'`,
		n, token, ttl.Seconds(), p.After, p.Documents, p.Chunks, p.Done, g.Alias)
	if err != nil {
		return classify(fmt.Errorf("renew the fill lease of generation %d: %w", n, err))
	}
	if tag.RowsAffected() == 0 {
		return &generation.FillLostError{Generation: n, Token: token}
	}
	return nil
}

// ReleaseFill ends the fill lease token holds, so that the next fill need
// not wait for it to expire: its writes have ended.
func (s *Store) ReleaseFill(ctx context.Context, g generation.Generation, token int64) error {
	n := g.Number
	_, err := s.pool.Exec(ctx, `UPDATE index_generations SET fill_until = NULL WHERE alias = $3 AND generation = $1 AND fill_token = $2`, n, token, g.Alias)
	if err != nil {
		return classify(fmt.Errorf("release the fill lease of generation %d: %w", n, err))
	}
	return nil
}

// LiveKeys returns up to limit keys of live documents after after, in key
// order: the fill's pages.
func (s *Store) LiveKeys(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT document_key FROM documents WHERE status = 'live' AND document_key > $1 ORDER BY document_key LIMIT $2`, after, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("read live document keys: %w", err))
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, classify(fmt.Errorf("read live document keys: %w", err))
	}
	return keys, nil
}

// CountLive returns the number of live documents, for the fill's ETA.
func (s *Store) CountLive(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM documents WHERE status = 'live'`).Scan(&n); err != nil {
		return 0, classify(fmt.Errorf("count live documents: %w", err))
	}
	return n, nil
}

// AbortGeneration marks building generation n aborted and raises the
// set's epoch, so run stops writing it: the relational store refuses a
// write that still wrote it, and the member writes the batch again to the
// new set. It also ends the fill's lease renewals (a renewal needs the
// generation building). Aborting an aborted generation again changes
// nothing; any other state is refused (*generation.ConflictError).
func (s *Store) AbortGeneration(ctx context.Context, g generation.Generation) error {
	n := g.Number
	return s.changeSet(ctx, fmt.Sprintf("abort index generation %d", n), func(tx pgx.Tx) (bool, error) {
		state, _, err := lockGeneration(ctx, tx, g)
		if err != nil {
			return false, err
		}
		switch state {
		case generation.Aborted:
			return false, nil
		case generation.Building:
		default:
			return false, &generation.ConflictError{Why: fmt.Sprintf("generation %d is %s: only a generation being built can be aborted", n, state)}
		}
		_, err = tx.Exec(ctx, `UPDATE index_generations SET state = 'aborted' WHERE alias = $2 AND generation = $1`, n, g.Alias)
		return err == nil, err
	})
}

// lockGeneration reads generation g's state, holding its row until the
// transaction ends, and the seconds left of its retire grace (0: none, or
// passed). A generation the registry lacks is a *generation.ConflictError.
func lockGeneration(ctx context.Context, tx pgx.Tx, g generation.Generation) (generation.State, float64, error) {
	var (
		state string
		left  float64
	)
	err := tx.QueryRow(ctx, `SELECT state, greatest(coalesce(extract(epoch FROM retire_after - now()), 0), 0)::float8
FROM index_generations WHERE alias = $2 AND generation = $1 FOR UPDATE`, g.Number, g.Alias).Scan(&state, &left)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, &generation.ConflictError{Why: fmt.Sprintf("there is no generation %d", g.Number)}
	}
	return generation.State(state), left, err
}

// changeSet runs change in a transaction that holds the set's row, and
// raises the epoch when change reports a change: the transaction waits for
// the relational writes in flight (they hold the row FOR SHARE), and every
// write after it finds the new epoch. A *generation.ConflictError of
// change is returned as it is; what fails is named by what.
func (s *Store) changeSet(ctx context.Context, what string, change func(tx pgx.Tx) (bool, error)) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT epoch FROM generation_set FOR UPDATE`); err != nil {
			return err
		}
		changed, err := change(tx)
		if err != nil || !changed {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE generation_set SET epoch = epoch + 1`)
		return err
	})
	if _, ok := errors.AsType[*generation.ConflictError](err); ok {
		return err
	}
	if err != nil {
		return classify(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// FillHeldFor returns how long the fill lease of generation n is held
// still (0: not held): a fill's write may land until then.
func (s *Store) FillHeldFor(ctx context.Context, g generation.Generation) (time.Duration, error) {
	n := g.Number
	var left float64
	err := s.pool.QueryRow(ctx, `SELECT greatest(coalesce(extract(epoch FROM fill_until - now()), 0), 0)::float8 FROM index_generations WHERE alias = $2 AND generation = $1`, n, g.Alias).Scan(&left)
	if err != nil {
		return 0, classify(fmt.Errorf("read the fill lease of generation %d: %w", n, err))
	}
	return time.Duration(left * float64(time.Second)), nil
}

// SwitchGeneration records sw in the registry: sw.To live (switched_at),
// the live generation sw.FromState(), and raises the set's epoch, in one
// transaction that waits for the relational writes in flight. Readers
// still search the alias, which the caller moves next: the registry goes
// first, so that a switch killed between the two is finished by the next
// (Set.Switching finds it registered). A switch recorded already changes
// nothing; a sw.To that is neither building nor retiring (a switch back),
// or a sw.From that is not live, is refused (*generation.ConflictError):
// another switch, a retire or an abort ran meanwhile. With requireFilled,
// a fill not done is refused too.
func (s *Store) SwitchGeneration(ctx context.Context, sw generation.Switch, requireFilled bool) error {
	alias, to, from := sw.To.Alias, sw.To.Number, sw.From.Number
	return s.changeSet(ctx, fmt.Sprintf("switch to index generation %d", to), func(tx pgx.Tx) (bool, error) {
		set, err := generations(ctx, tx, alias)
		if err != nil {
			return false, err
		}
		var target, live *generation.Generation
		for i, g := range set {
			if g.Number == to {
				target = &set[i]
			}
			if g.State == generation.Live {
				live = &set[i]
			}
		}
		switch {
		case target == nil:
			return false, &generation.ConflictError{Why: fmt.Sprintf("there is no generation %d", to)}
		case target.State == generation.Live:
			return false, nil
		case target.State != generation.Building && target.State != generation.Retiring:
			return false, &generation.ConflictError{Why: fmt.Sprintf("generation %d is %s: only a generation being built, or a retiring one, can be switched to", to, target.State)}
		case live == nil || live.Number != from:
			return false, &generation.ConflictError{Why: fmt.Sprintf("generation %d is no longer the live one (another switch ran meanwhile)", from)}
		case requireFilled && target.State == generation.Building && !target.Fill.Done:
			return false, &generation.ConflictError{Why: fmt.Sprintf("the fill of generation %d is not done", to)}
		}
		// The old live one first: one live generation per alias.
		if _, err := tx.Exec(ctx, `UPDATE index_generations SET state = $3,
	retire_after = CASE WHEN $3 = 'retired' THEN now() END
WHERE alias = $1 AND generation = $2`, alias, from, string(sw.FromState())); err != nil {
			return false, err
		}
		_, err = tx.Exec(ctx, `UPDATE index_generations SET state = 'live', switched_at = now()
WHERE alias = $1 AND generation = $2`, alias, to)
		return err == nil, err
	})
}

// RetireGeneration marks retiring generation g retired, deletable after
// grace, and raises the set's epoch, so run stops writing it: the
// relational store refuses a write that still wrote it, and a member
// whose live generation it is halts its partitions (generation.Tracker).
// It returns how long the collection must be kept still (0: it may be
// deleted). Retiring a retired generation again changes nothing and
// returns the time left of its first grace; any other state is refused
// (*generation.ConflictError).
func (s *Store) RetireGeneration(ctx context.Context, g generation.Generation, grace time.Duration) (time.Duration, error) {
	n := g.Number
	var left float64
	err := s.changeSet(ctx, fmt.Sprintf("retire index generation %d", n), func(tx pgx.Tx) (bool, error) {
		state, graceLeft, err := lockGeneration(ctx, tx, g)
		if err != nil {
			return false, err
		}
		left = graceLeft
		switch state {
		case generation.Retired:
			return false, nil
		case generation.Retiring:
		default:
			return false, &generation.ConflictError{Why: fmt.Sprintf("generation %d is %s: only a generation the alias left (retiring) can be retired", n, state)}
		}
		left = grace.Seconds()
		_, err = tx.Exec(ctx, `UPDATE index_generations SET state = 'retired', retire_after = now() + make_interval(secs => $3)
WHERE alias = $2 AND generation = $1`, n, g.Alias, left)
		return err == nil, err
	})
	return time.Duration(left * float64(time.Second)), err
}
