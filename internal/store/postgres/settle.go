package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
)

// The index's settle after a partition changed hands (project.Settle): a
// write made while an earlier owner's late index write may still land
// records its documents in index_settle, in its own transaction, and the
// owner settles and forgets them once no such write can land any more.
// The rows are the partition's, not a writer's: an owner that loses the
// partition before its settle leaves them to the next one.

const (
	recordUnsettled = `
INSERT INTO index_settle (source_topic, source_partition, document_key)
SELECT $1, $2, k FROM unnest($3::text[]) AS u(k)
ON CONFLICT DO NOTHING`
	listUnsettled = `
SELECT document_key FROM index_settle
WHERE source_topic = $1 AND source_partition = $2 AND document_key > $3
ORDER BY document_key LIMIT $4`
	forgetUnsettled = `DELETE FROM index_settle WHERE source_topic = $1 AND source_partition = $2 AND document_key = ANY($3)`
)

var _ project.Settlement = (*Store)(nil)

// Unsettled returns up to limit documents of f's partition recorded for its
// settle, after the key after, in key order; a *project.FencedError when
// the partition has a newer writer.
func (s *Store) Unsettled(ctx context.Context, f project.Fence, after string, limit int) ([]string, error) {
	if err := s.CheckFence(ctx, f); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, listUnsettled, f.Topic, f.Partition, after, limit)
	if err != nil {
		return nil, classify(fmt.Errorf("read the documents to settle: %w", err))
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, classify(fmt.Errorf("read the documents to settle: %w", err))
	}
	return keys, nil
}

// Settled forgets keys of f's partition, in a transaction that refuses a
// fence that is not the newest.
func (s *Store) Settled(ctx context.Context, f project.Fence, keys []string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := checkFence(f, tx.QueryRow(ctx, readFence, f.Topic, f.Partition)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, forgetUnsettled, f.Topic, f.Partition, keys)
		return err
	})
	if err != nil {
		return classify(fmt.Errorf("forget the settled documents: %w", err))
	}
	return nil
}
