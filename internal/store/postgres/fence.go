package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// acquireFence raises a partition's token and records who holds it, and
// until when an index write of an earlier owner may still land: $4 seconds
// from now when the last owner did not release the partition, else as
// before (an owner before it may still be late). It returns the token and
// the seconds of that window left.
const acquireFence = `
INSERT INTO partition_writers AS p (source_topic, source_partition, token, writer)
VALUES ($1, $2, 1, $3)
ON CONFLICT (source_topic, source_partition) DO UPDATE SET token = p.token + 1, writer = excluded.writer, assigned_at = now(),
	released = false,
	late_until = CASE WHEN p.released THEN p.late_until ELSE greatest(p.late_until, now() + make_interval(secs => $4)) END
RETURNING token, greatest(coalesce(extract(epoch FROM late_until - now()), 0), 0)::float8`

// releaseFence records that a partition's writer stopped with nothing on
// its way; only the newest writer's release counts.
const releaseFence = `UPDATE partition_writers SET released = true WHERE source_topic = $1 AND source_partition = $2 AND token = $3`

// readFence reads a partition's newest token, holding the row against a
// new assignment until the transaction ends.
const readFence = `SELECT token FROM partition_writers WHERE source_topic = $1 AND source_partition = $2 FOR SHARE`

// peekFence reads a partition's newest token, holding nothing.
const peekFence = `SELECT token FROM partition_writers WHERE source_topic = $1 AND source_partition = $2`

var _ project.Tokens = (*Store)(nil)

// AcquireFence gives writer, a process's name, the partition's next
// token. The consumer calls it when the partition is assigned, before the
// first batch. late is how long from now an index write of an earlier
// owner may still land: lateFor when the last owner did not release the
// partition (project.LateWindow).
func (s *Store) AcquireFence(ctx context.Context, topic string, partition int32, writer string, lateFor time.Duration) (project.Fence, time.Duration, error) {
	var (
		token int64
		late  float64
	)
	if err := s.pool.QueryRow(ctx, acquireFence, topic, partition, writer, lateFor.Seconds()).Scan(&token, &late); err != nil {
		return project.Fence{}, 0, classify(fmt.Errorf("take the fencing token of %s/%d: %w", topic, partition, err))
	}
	return project.Fence{Topic: topic, Partition: partition, Token: token}, time.Duration(late * float64(time.Second)), nil
}

// ReleaseFence records that f's writer has stopped writing its partition,
// unless a newer writer holds it.
func (s *Store) ReleaseFence(ctx context.Context, f project.Fence) error {
	if _, err := s.pool.Exec(ctx, releaseFence, f.Topic, f.Partition, f.Token); err != nil {
		return classify(fmt.Errorf("release the fencing token of %s/%d: %w", f.Topic, f.Partition, err))
	}
	return nil
}

// CheckFence returns a *project.FencedError when f's partition has a newer
// writer.
func (s *Store) CheckFence(ctx context.Context, f project.Fence) error {
	if err := checkFence(f, s.pool.QueryRow(ctx, peekFence, f.Topic, f.Partition)); err != nil {
		return classify(fmt.Errorf("read the fencing token: %w", err))
	}
	return nil
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
