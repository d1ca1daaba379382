package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
)

// The reconcile command reads the decision store in key order and each
// store by document key; these are the relational store's side of it.
var (
	_ reconcile.Decisions = (*Store)(nil)
	_ reconcile.Store     = (*Store)(nil)
	_ reconcile.Source    = (*Store)(nil)
	_ reconcile.Counter   = (*Store)(nil)
	_ reconcile.Lease     = (*Lease)(nil)
)

// Decisions returns up to q.Limit documents whose key is after q.After and
// starts with q.Prefix, updated at or after q.Since when it is set, in key
// order: one keyset page of the decision store.
func (s *Store) Decisions(ctx context.Context, q reconcile.Page) ([]reconcile.Decision, error) {
	var since *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	rows, err := s.pool.Query(ctx, `
SELECT document_key, version, status, chunk_count FROM documents
WHERE document_key > $1 AND starts_with(document_key, $2) AND ($3::timestamptz IS NULL OR updated_at >= $3)
ORDER BY document_key LIMIT $4`, q.After, q.Prefix, since, q.Limit)
	if err != nil {
		return nil, classify(fmt.Errorf("read documents: %w", err))
	}
	out := make([]reconcile.Decision, 0, q.Limit)
	var (
		d      reconcile.Decision
		status string
	)
	_, err = pgx.ForEachRow(rows, []any{&d.Key, &d.Version, &status, &d.ChunkCount}, func() error {
		d.Withdrawn = status == statusWithdrawn
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("read documents: %w", err))
	}
	return out, nil
}

// Known returns which of keys have a documents row.
func (s *Store) Known(ctx context.Context, keys []string) (map[string]bool, error) {
	return setOf[string](ctx, s, "look up documents", `SELECT document_key FROM documents WHERE document_key = ANY($1)`, keys)
}

// setOf runs a query of one column and returns the set of its values.
func setOf[T comparable](ctx context.Context, s *Store, what, query string, arg any) (map[T]bool, error) {
	rows, err := s.pool.Query(ctx, query, arg)
	if err != nil {
		return nil, classify(fmt.Errorf("%s: %w", what, err))
	}
	out := map[T]bool{}
	var v T
	_, err = pgx.ForEachRow(rows, []any{&v}, func() error {
		out[v] = true
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("%s: %w", what, err))
	}
	return out, nil
}

// Holdings returns the chunks rows of each document: the relational store
// compared with its own documents table, as a row written by hand could
// make them disagree.
func (s *Store) Holdings(ctx context.Context, keys []string) (map[string]reconcile.Holding, error) {
	rows, err := s.pool.Query(ctx, `SELECT document_key, chunk_id, version FROM chunks WHERE document_key = ANY($1)`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("read chunk ids: %w", err))
	}
	out := make(map[string]reconcile.Holding, len(keys))
	var (
		key string
		c   reconcile.Held
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &c.ID, &c.Version}, func() error {
		h := out[key]
		h.Chunks = append(h.Chunks, c)
		out[key] = h
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("read chunk ids: %w", err))
	}
	return out, nil
}

// ScanKeys calls fn with pages of the distinct document keys of the chunks
// table that start with prefix, in key order, pageSize keys at most each.
func (s *Store) ScanKeys(ctx context.Context, prefix string, pageSize int, fn func([]string) error) error {
	after := ""
	for {
		rows, err := s.pool.Query(ctx, `
SELECT DISTINCT document_key FROM chunks
WHERE document_key > $1 AND starts_with(document_key, $2)
ORDER BY document_key LIMIT $3`, after, prefix, pageSize)
		if err != nil {
			return classify(fmt.Errorf("scan chunk keys: %w", err))
		}
		page, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return classify(fmt.Errorf("scan chunk keys: %w", err))
		}
		if len(page) == 0 {
			return nil
		}
		if err := fn(page); err != nil {
			return err
		}
		if len(page) < pageSize {
			return nil
		}
		after = page[len(page)-1]
	}
}

// Count returns the number of chunks rows of documents whose key starts
// with prefix. It reads the whole table, which in a large store takes
// longer than StatementTimeout, so it lifts it; it takes no lock a writer
// waits for.
func (s *Store) Count(ctx context.Context, prefix string) (int64, bool, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, unboundedStatements); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM chunks WHERE starts_with(document_key, $1)`, prefix).Scan(&n)
	})
	if err != nil {
		return 0, false, classify(fmt.Errorf("count chunks: %w", err))
	}
	return n, true, nil
}

// DeleteDocuments removes every chunks row of documents that have no
// documents row: the relational orphans of unknown documents. A known
// document is repaired by re-applying it instead, so its row is kept. Like
// every relational write of a repair, it first checks in its transaction
// that the repair lease is still the repair's (lease.go).
func (s *Store) DeleteDocuments(ctx context.Context, keys []string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.checkLease(tx.QueryRow(ctx, readLease)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
DELETE FROM chunks c WHERE c.document_key = ANY($1)
AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.document_key = c.document_key)`, keys)
		return err
	})
	if err != nil {
		return classify(fmt.Errorf("delete chunks of unknown documents: %w", err))
	}
	return nil
}

// Reprojection rebuilds, from the documents and chunks rows, the write that
// projected the current state of keys: the same ids, texts, metadata and
// vectors, each with the index generation whose embedder made it, so
// applying it again writes every store as the original projection did
// (a generation of another model embeds its own, project.Reembed). A live document whose chunks rows are incomplete cannot
// be rebuilt; it is returned in incomplete, with the ordinals it lacks, and
// left out of the write. Unknown keys are left out.
func (s *Store) Reprojection(ctx context.Context, docKeys []string) (*project.Write, map[string][]int, error) {
	rows, err := s.pool.Query(ctx, `
SELECT document_key, version, status, content_hash, title, source, metadata::text, chunk_count, correlation_id, `+positionColumns+`
FROM documents WHERE document_key = ANY($1) ORDER BY document_key`, docKeys)
	if err != nil {
		return nil, nil, classify(fmt.Errorf("read documents: %w", err))
	}
	w := &project.Write{}
	var (
		d        project.Document
		status   string
		metadata *string
		count    int
		pos      storedPosition
	)
	targets := append([]any{&d.Key, &d.Version, &status, &d.ContentHash, &d.Title, &d.Source, &metadata, &count, &d.CorrelationID}, pos.targets()...)
	_, err = pgx.ForEachRow(rows, targets, func() error {
		// The repair writes the row back as it is, position included.
		d.Position = pos.position()
		if status == statusWithdrawn {
			w.Withdrawn = append(w.Withdrawn, project.Withdrawal{Key: d.Key, Version: d.Version, Position: d.Position})
			return nil
		}
		doc := d
		md, err := metadataOf(metadata)
		if err != nil {
			return fmt.Errorf("document %q metadata: %w", d.Key, err)
		}
		doc.Metadata = md
		doc.Chunks = make([]project.Chunk, count)
		w.Live = append(w.Live, doc)
		return nil
	})
	if err != nil {
		return nil, nil, classify(fmt.Errorf("read documents: %w", err))
	}
	if len(w.Live) == 0 {
		return w, nil, nil
	}
	live := make(map[string]*project.Document, len(w.Live))
	liveKeys := make([]string, len(w.Live))
	for i := range w.Live {
		live[w.Live[i].Key] = &w.Live[i]
		liveKeys[i] = w.Live[i].Key
	}
	rows, err = s.pool.Query(ctx, `
SELECT c.chunk_id, c.document_key, c.ordinal, c.text, c.metadata::text, c.vector, c.vector_generation
FROM chunks c JOIN documents d ON d.document_key = c.document_key AND d.version = c.version
WHERE c.document_key = ANY($1)`, liveKeys)
	if err != nil {
		return nil, nil, classify(fmt.Errorf("read chunks: %w", err))
	}
	var (
		c      project.Chunk
		vector []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.DocumentKey, &c.Ordinal, &c.Text, &metadata, &vector, &c.Generation}, func() error {
		doc := live[c.DocumentKey]
		// A row whose id is not the one its ordinal derives is not the
		// projector's: it is an orphan, not part of the document.
		if c.Ordinal < 0 || c.Ordinal >= len(doc.Chunks) || c.ID != keys.ChunkID(doc.Key, doc.Version, c.Ordinal) {
			return nil
		}
		ch := c
		ch.Version = doc.Version
		var err error
		if ch.Metadata, err = metadataOf(metadata); err != nil {
			return fmt.Errorf("chunk %s metadata: %w", c.ID, err)
		}
		if ch.Vector, err = DecodeVector(vector); err != nil {
			return fmt.Errorf("chunk %s: %w", c.ID, err)
		}
		doc.Chunks[c.Ordinal] = ch
		return nil
	})
	if err != nil {
		return nil, nil, classify(fmt.Errorf("read chunks: %w", err))
	}
	var incomplete map[string][]int
	complete := w.Live[:0]
	for _, doc := range w.Live {
		var lacking []int
		for i, ch := range doc.Chunks {
			if ch.ID == uuid.Nil {
				lacking = append(lacking, i)
			}
		}
		if len(lacking) > 0 {
			if incomplete == nil {
				incomplete = map[string][]int{}
			}
			incomplete[doc.Key] = lacking
			continue
		}
		complete = append(complete, doc)
	}
	w.Live = complete
	return w, incomplete, nil
}

// metadataOf decodes a jsonb column the way the event decoder reads
// metadata: integers that fit int64 stay integers, other numbers are float64.
func metadataOf(text *string) (map[string]any, error) {
	if text == nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(*text)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	for k, v := range m {
		n, ok := v.(json.Number)
		if !ok {
			continue
		}
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			m[k] = i
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%s is a number out of range", k)
		}
		m[k] = f
	}
	return m, nil
}

// HasChunks reports which of ids the chunks table holds.
func (s *Store) HasChunks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	return setOf[uuid.UUID](ctx, s, "look up chunks", `SELECT chunk_id FROM chunks WHERE chunk_id = ANY($1)`, ids)
}

// PruneLedger deletes ledger rows projected before cutoff, batch rows per
// transaction, until none is left. It never deletes the row of a
// document's current version (its (document_key, version) equals the
// documents row's): that row is the proof the current state was applied.
// It returns how many rows it deleted; after is called after each batch.
func (s *Store) PruneLedger(ctx context.Context, cutoff time.Time, batch int, after func(deleted int64)) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `
DELETE FROM ledger WHERE idempotency_key IN (
	SELECT l.idempotency_key FROM ledger l
	WHERE l.projected_at < $1
	AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.document_key = l.document_key AND d.version = l.version)
	LIMIT $2)`, cutoff, batch)
		if err != nil {
			return total, classify(fmt.Errorf("prune ledger: %w", err))
		}
		n := tag.RowsAffected()
		total += n
		if after != nil {
			after(total)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Placed is a live document's version and the log position of the event
// that projected it, which documents keeps.
type Placed struct {
	Version     int64
	ContentHash string
	ChunkCount  int
	Position    project.Position
}

// Positions returns, for each live document of keys, its version and the
// position of the event that last changed it, so that a repair can read
// that event again when the chunk rows are gone. Positions of rows written
// before they were recorded are the zero Position.
func (s *Store) Positions(ctx context.Context, keys []string) (map[string]Placed, error) {
	rows, err := s.pool.Query(ctx, `SELECT document_key, version, content_hash, chunk_count, `+positionColumns+`
FROM documents WHERE document_key = ANY($1) AND status = 'live'`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("read document positions: %w", err))
	}
	out := make(map[string]Placed, len(keys))
	var (
		key string
		p   Placed
		pos storedPosition
	)
	_, err = pgx.ForEachRow(rows, append([]any{&key, &p.Version, &p.ContentHash, &p.ChunkCount}, pos.targets()...), func() error {
		p.Position = pos.position()
		out[key] = p
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("read document positions: %w", err))
	}
	return out, nil
}
