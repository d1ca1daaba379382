package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
)

// Fencing: every assignment of a partition to a member takes a new token
// from partition_writers, one higher than the last, and every write of the
// member carries it (project.Fence). A write's transaction reads the
// partition's row FOR SHARE and goes on only if its token is the newest:
// the row lock orders it against the next assignment, whose UPDATE waits
// for the writes holding the row and, once committed, makes every later
// write of an older token fail. So once a member has its token, no write
// of an earlier owner commits in this store.

// acquireFence raises a partition's token and records who holds it.
const acquireFence = `
INSERT INTO partition_writers AS p (source_topic, source_partition, token, writer)
VALUES ($1, $2, 1, $3)
ON CONFLICT (source_topic, source_partition) DO UPDATE SET token = p.token + 1, writer = excluded.writer, assigned_at = now()
RETURNING token`

// readFence reads a partition's newest token, holding the row against a
// new assignment until the transaction ends.
const readFence = `SELECT token FROM partition_writers WHERE source_topic = $1 AND source_partition = $2 FOR SHARE`

// peekFence reads a partition's newest token, holding nothing.
const peekFence = `SELECT token FROM partition_writers WHERE source_topic = $1 AND source_partition = $2`

// AcquireFence gives writer, a process's name, the partition's next
// token. The consumer calls it when the partition is assigned, before the
// first batch.
func (s *Store) AcquireFence(ctx context.Context, topic string, partition int32, writer string) (project.Fence, error) {
	var token int64
	if err := s.pool.QueryRow(ctx, acquireFence, topic, partition, writer).Scan(&token); err != nil {
		return project.Fence{}, classify(fmt.Errorf("take the fencing token of %s/%d: %w", topic, partition, err))
	}
	return project.Fence{Topic: topic, Partition: partition, Token: token}, nil
}

// checkFence scans a partition's newest token from row and returns a
// *project.FencedError when it is not f's. A partition without a row has
// had no fenced writer, which a write with a token cannot be: it is
// refused too.
func checkFence(f project.Fence, row pgx.Row) error {
	var newest int64
	err := row.Scan(&newest)
	if errors.Is(err, pgx.ErrNoRows) {
		newest, err = 0, nil
	}
	if err != nil {
		return err
	}
	if newest != f.Token {
		return &project.FencedError{Store: project.StoreRelational, Fence: f, Newest: newest}
	}
	return nil
}
