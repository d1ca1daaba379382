// Package postgres is the relational store: documents, chunks and the
// ledger in PostgreSQL. It is written last in every path, and its
// transaction carries the ledger rows, so a ledger row proves that the index
// and graph writes of the same batch were acknowledged before it.
//
// Every statement is a constant string with parameters. Tables are found
// through the connection's search_path, set to the configured schema, so no
// statement is built from a name.
package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/projector/projector/internal/project"
)

// Store is the PostgreSQL adapter. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	// lease is set while this Store holds the repair lease: its writes
	// then check that it still does, instead of waiting for it.
	lease atomic.Pointer[Lease]
	// faults is told the point inside a write's transaction; nil in
	// production (InjectFaults).
	faults project.Faults
}

// BeforeCommit is the fault point inside every write's transaction, after
// its statements ran (its partition's row held FOR SHARE) and before its
// commit: where the tests freeze a writer.
const BeforeCommit = "before-relational-commit"

// InjectFaults makes every write tell f the point BeforeCommit, for the
// tests of a writer stopped inside its transaction (internal/fault). Call
// it before the first write.
func (s *Store) InjectFaults(f project.Faults) { s.faults = f }

var _ project.Relational = (*Store)(nil)

// defaultConnectTimeout bounds a connection attempt when the DSN sets no
// connect_timeout, so a hung server is reported and retried like a down one.
const defaultConnectTimeout = 10 * time.Second

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to dsn with tables in schema (created by Migrate). The pool
// connects lazily; use Ping to find out whether the server answers. Every
// session starts with the bounds of session.go, unless the DSN sets its own.
func Open(ctx context.Context, dsn, schema string) (*Store, error) {
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("postgres schema %q: want lower-case letters, digits and _, starting with a letter or _", schema)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors can quote the connection string, password
		// included; say only that it did not parse.
		return nil, errors.New("parse postgres dsn: invalid connection string")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// libpq's default is to wait for ever, so a server that accepts
		// connections and never answers would hang the start without a
		// word. connect_timeout in the DSN overrides this.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "projector"
	bound(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	return &Store{pool: pool, schema: schema}, nil
}

// Close releases every connection.
func (s *Store) Close() { s.pool.Close() }

// Name is the store's label.
func (s *Store) Name() string { return project.StoreRelational }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	return classify(s.pool.Ping(ctx))
}

// Pool exposes the pool to the reconcile and test code of this module.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// positionColumns selects a documents row's position; storedPosition
// scans it.
const positionColumns = `coalesce(source_topic, ''), source_topic_id, coalesce(source_partition, 0), coalesce(source_offset, 0)`

// storedPosition is the scan target of positionColumns.
type storedPosition struct {
	topic     string
	topicID   *uuid.UUID
	partition int32
	offset    int64
}

func (p *storedPosition) targets() []any { return []any{&p.topic, &p.topicID, &p.partition, &p.offset} }

func (p *storedPosition) position() project.Position {
	pos := project.Position{Topic: p.topic, Partition: p.partition, Offset: p.offset}
	if p.topicID != nil {
		pos.TopicID = project.TopicID(*p.topicID)
	}
	return pos
}

// States returns the stored state of the given documents, with the
// position of the event that last changed each (zero when unknown). With a
// fence, it first returns a *project.FencedError if the partition has a
// newer writer.
func (s *Store) States(ctx context.Context, fence project.Fence, keys []string) (map[string]project.State, error) {
	if fence.Token > 0 {
		if err := checkFence(fence, s.pool.QueryRow(ctx, peekFence, fence.Topic, fence.Partition)); err != nil {
			return nil, classify(fmt.Errorf("read the fencing token: %w", err))
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT document_key, version, status, content_hash, `+positionColumns+`
FROM documents WHERE document_key = ANY($1)`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("read document states: %w", err))
	}
	out := make(map[string]project.State, len(keys))
	var (
		key, status, hash string
		version           int64
		pos               storedPosition
	)
	_, err = pgx.ForEachRow(rows, append([]any{&key, &version, &status, &hash}, pos.targets()...), func() error {
		out[key] = project.State{Version: version, Withdrawn: status == statusWithdrawn, ContentHash: hash, Position: pos.position()}
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("read document states: %w", err))
	}
	return out, nil
}

const (
	statusLive      = "live"
	statusWithdrawn = "withdrawn"
)

// Rows only change when their content does: a redelivery or a replay leaves
// every row, updated_at included, exactly as it was. An unknown position
// (no topic) is stored as NULLs. A row only moves
// forward: to a higher version, or at the same version from live to
// withdrawn or to a later offset of the same log, so a late write of a
// member that lost its partition cannot take a document back.
const upsertDocuments = `
INSERT INTO documents AS d (document_key, version, status, content_hash, title, source, metadata, chunk_count, correlation_id,
	source_topic, source_topic_id, source_partition, source_offset)
SELECT k, v, st, h, ti, so, NULLIF(md, '')::jsonb, n, c,
	NULLIF(tp, ''), NULLIF(tid, '')::uuid, CASE WHEN tp <> '' THEN pa END, CASE WHEN tp <> '' THEN po END
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[],
	$10::text[], $11::text[], $12::int[], $13::bigint[])
	AS u(k, v, st, h, ti, so, md, n, c, tp, tid, pa, po)
ON CONFLICT (document_key) DO UPDATE SET
	version = excluded.version, status = excluded.status, content_hash = excluded.content_hash,
	title = excluded.title, source = excluded.source, metadata = excluded.metadata,
	chunk_count = excluded.chunk_count, correlation_id = excluded.correlation_id,
	source_topic = excluded.source_topic, source_topic_id = excluded.source_topic_id,
	source_partition = excluded.source_partition, source_offset = excluded.source_offset, updated_at = now()
WHERE (excluded.version > d.version OR (excluded.version = d.version
		AND NOT (d.status = 'withdrawn' AND excluded.status = 'live')
		AND NOT coalesce(d.source_topic = excluded.source_topic AND d.source_partition = excluded.source_partition
			AND (d.source_topic_id IS NULL OR excluded.source_topic_id IS NULL OR d.source_topic_id = excluded.source_topic_id)
			AND excluded.source_offset < d.source_offset, false)))
	AND (d.version, d.status, d.content_hash, d.title, d.source, d.metadata, d.chunk_count,
		d.source_topic, d.source_topic_id, d.source_partition, d.source_offset)
	IS DISTINCT FROM (excluded.version, excluded.status, excluded.content_hash, excluded.title, excluded.source, excluded.metadata, excluded.chunk_count,
		excluded.source_topic, excluded.source_topic_id, excluded.source_partition, excluded.source_offset)`

// createChunkStage creates the connection's staging table of chunk rows:
// COPY fills it, then upsertChunks moves its rows into chunks. COPY sends
// rows in PostgreSQL's binary row format, which the server takes in faster
// than the same rows as unnest() arrays (docs/benchmarks.md). The table
// lives as long as the connection and is emptied at every commit (and a
// rollback takes back its rows), so it is created once per connection,
// not once per batch; it is temporary, so concurrent writers never see
// each other's rows.
const createChunkStage = `
CREATE TEMPORARY TABLE IF NOT EXISTS projector_chunk_stage (
	chunk_id uuid NOT NULL, document_key text NOT NULL, version bigint NOT NULL, ordinal integer NOT NULL,
	text text NOT NULL, metadata text NOT NULL, vector bytea NOT NULL, vector_generation integer NOT NULL
) ON COMMIT DELETE ROWS`

var (
	chunkStage        = pgx.Identifier{"pg_temp", "projector_chunk_stage"}
	chunkStageColumns = []string{"chunk_id", "document_key", "version", "ordinal", "text", "metadata", "vector", "vector_generation"}
)

// heldByRow is true where the documents row d holds the event that the
// batch's row b of a document carries: the same version, live, and the
// same log position (no position on either side is the same). It keeps a
// late write out of the chunks: of an older version, and of an earlier
// event of the same version (a conflict overwritten since, whose chunk
// ids are the same as the newer content's).
const heldByRow = `d.version = b.v AND d.status = 'live'
	AND d.source_topic IS NOT DISTINCT FROM NULLIF(b.tp, '')
	AND d.source_partition IS NOT DISTINCT FROM CASE WHEN b.tp <> '' THEN b.pa END
	AND d.source_offset IS NOT DISTINCT FROM CASE WHEN b.tp <> '' THEN b.po END`

// upsertChunks runs after upsertDocuments in the same transaction and
// writes only the chunks of documents whose row now holds the event the
// batch wrote (heldByRow): a late write adds nothing.
const upsertChunks = `
INSERT INTO chunks AS c (chunk_id, document_key, version, ordinal, text, metadata, vector, vector_generation)
SELECT s.chunk_id, s.document_key, s.version, s.ordinal, s.text, NULLIF(s.metadata, '')::jsonb, s.vector, s.vector_generation
FROM pg_temp.projector_chunk_stage s
JOIN unnest($1::text[], $2::bigint[], $3::text[], $4::int[], $5::bigint[]) AS b(k, v, tp, pa, po)
	ON b.k = s.document_key AND b.v = s.version
JOIN documents d ON d.document_key = s.document_key AND ` + heldByRow + `
ON CONFLICT (chunk_id) DO UPDATE SET
	document_key = excluded.document_key, version = excluded.version, ordinal = excluded.ordinal,
	text = excluded.text, metadata = excluded.metadata, vector = excluded.vector, vector_generation = excluded.vector_generation
WHERE (c.document_key, c.version, c.ordinal, c.text, c.metadata, c.vector, c.vector_generation)
	IS DISTINCT FROM (excluded.document_key, excluded.version, excluded.ordinal, excluded.text, excluded.metadata, excluded.vector, excluded.vector_generation)`

// deleteOtherChunks removes the chunks of the batch's documents that the
// documents rows, as the batch left them, no longer have: every chunk of a
// withdrawn document, chunks of older versions, and, where the row holds
// the event the batch wrote (heldByRow), its ordinals beyond a shrunk
// document. A newer event's chunks are never removed by an older event's
// write.
const deleteOtherChunks = `
DELETE FROM chunks c USING documents d, unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::int[], $6::bigint[]) AS b(k, v, st, tp, pa, po)
WHERE c.document_key = b.k AND d.document_key = b.k
	AND (d.status = 'withdrawn' OR c.version < d.version
		OR (b.st = 'live' AND ` + heldByRow + `
			AND c.chunk_id NOT IN (SELECT chunk_id FROM pg_temp.projector_chunk_stage)))`

// The first projection of an event stays in the ledger; a redelivery does
// not rewrite it. An overwritten conflict updates the content it recorded.
const insertLedger = `
INSERT INTO ledger AS l (idempotency_key, document_key, version, op, content_hash, chunk_count,
	source_topic, source_partition, source_offset, correlation_id, writer)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[],
	$7::text[], $8::int[], $9::bigint[], $10::text[], $11::text[])
ON CONFLICT (idempotency_key) DO UPDATE SET content_hash = excluded.content_hash, chunk_count = excluded.chunk_count
WHERE l.content_hash IS DISTINCT FROM excluded.content_hash`

// Apply writes w and the ledger entries in one transaction: the chunk
// rows by COPY into the staging table, then every statement as one round
// trip. The transaction first checks w's fence (refusing with a
// *project.FencedError when the partition has a newer writer), then the
// repair lease (lease.go): run's write waits while a repair holds it (a
// *project.WaitError), a repair's write must still hold it; then, with
// w.Epoch, that the index generations its index step wrote are still the
// registry's (generations.go). With w.Settle it records the documents for
// the partition's settle (settle.go).
func (s *Store) Apply(ctx context.Context, w *project.Write, ledger []project.LedgerEntry) error {
	b := &pgx.Batch{}
	docs, chunks, err := columnsOf(w)
	if err != nil {
		return err
	}
	fenced := w.Fence.Token > 0
	if fenced {
		b.Queue(readFence, w.Fence.Topic, w.Fence.Partition)
	}
	b.Queue(readLease)
	if w.Epoch > 0 {
		b.Queue(readGenerationEpoch)
	}
	if len(docs.keys) > 0 {
		b.Queue(upsertDocuments, docs.keys, docs.versions, docs.statuses, docs.hashes, docs.titles, docs.sources, docs.metadata, docs.counts, docs.correlations,
			docs.topics, docs.topicIDs, docs.partitions, docs.offsets)
	}
	if len(chunks.ids) > 0 {
		b.Queue(upsertChunks, docs.keys, docs.versions, docs.topics, docs.partitions, docs.offsets)
	}
	if len(docs.keys) > 0 {
		b.Queue(deleteOtherChunks, docs.keys, docs.versions, docs.statuses, docs.topics, docs.partitions, docs.offsets)
	}
	if len(ledger) > 0 {
		l := newLedgerColumns(ledger)
		b.Queue(insertLedger, l.keys, l.docs, l.versions, l.ops, l.hashes, l.counts, l.topics, l.partitions, l.offsets, l.correlations, l.writers)
	}
	if w.Settle && fenced && len(docs.keys) > 0 {
		b.Queue(recordUnsettled, w.Fence.Topic, w.Fence.Partition, docs.keys)
	}
	if len(docs.keys) == 0 && len(ledger) == 0 {
		return nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(docs.keys) > 0 {
			if _, err := tx.Exec(ctx, createChunkStage); err != nil {
				return err
			}
		}
		if len(chunks.ids) > 0 {
			if _, err := tx.CopyFrom(ctx, chunkStage, chunkStageColumns, chunks.rows()); err != nil {
				return err
			}
		}
		results := tx.SendBatch(ctx, b)
		if fenced {
			if err := checkFence(w.Fence, results.QueryRow()); err != nil {
				_ = results.Close()
				return err
			}
		}
		if err := s.checkLease(results.QueryRow()); err != nil {
			_ = results.Close()
			return err
		}
		if w.Epoch > 0 {
			if err := checkGenerationEpoch(w.Epoch, results.QueryRow()); err != nil {
				_ = results.Close()
				return err
			}
		}
		if err := results.Close(); err != nil {
			return err
		}
		if s.faults != nil {
			s.faults.At(ctx, BeforeCommit)
		}
		return nil
	})
	if err != nil {
		return classify(fmt.Errorf("write batch: %w", err))
	}
	return nil
}

// ChunkCounts returns the number of chunks per document.
func (s *Store) ChunkCounts(ctx context.Context, keys []string) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT document_key, count(*) FROM chunks WHERE document_key = ANY($1) GROUP BY document_key`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("count chunks: %w", err))
	}
	out := make(map[string]int, len(keys))
	var (
		key string
		n   int
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &n}, func() error {
		out[key] = n
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("count chunks: %w", err))
	}
	return out, nil
}

// EncodeVector stores a vector as little-endian float32 values, the layout
// of the chunks.vector column.
func EncodeVector(v []float32) []byte {
	return appendVector(make([]byte, 0, 4*len(v)), v)
}

// appendVector appends v to b in the layout of EncodeVector.
func appendVector(b []byte, v []float32) []byte {
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// DecodeVector reads the chunks.vector column.
func DecodeVector(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("vector of %d bytes is not a whole number of float32 values", len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// classify wraps a PostgreSQL error as a project.StoreError whose kind says
// whether retrying can help and whether a record is to blame (see
// docs/operations.md, "Store errors").
func classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*project.FencedError](err); ok {
		return err // not a failure of the store: its answer
	}
	if _, ok := errors.AsType[*project.WaitError](err); ok {
		return err
	}
	if _, ok := errors.AsType[*project.GenerationsChangedError](err); ok {
		return err
	}
	if se, ok := errors.AsType[*project.StoreError](err); ok {
		return se // classified where it was made (a lost repair lease)
	}
	kind, limit := project.Transient, ""
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case certificateRejected(err):
		kind = project.Fatal
	case errors.As(err, &pgErr) && pgErr.Code == "57014" && !strings.Contains(pgErr.Message, "statement timeout"):
		// A statement cancelled on request (the call's context ended, an
		// operator's pg_cancel_backend) is not the timeout's limit.
	case lockTimedOut(err):
		err = lockTimeout{err}
	case errors.As(err, &pgErr):
		kind, limit = kindOfCode(pgErr.Code)
	case pgconn.SafeToRetry(err):
	}
	return &project.StoreError{Store: project.StoreRelational, Kind: kind, LimitName: limit, Err: err}
}

// lockTimedOut reports whether err is a wait for a lock that LockTimeout
// (or the DSN's lock_timeout) ended: another session holds it.
func lockTimedOut(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "55P03"
}

// lockTimeout is a lock_timeout error with project.ErrLockTimeout in its
// chain, so a caller can say what it waited for; its message is the
// server's.
type lockTimeout struct{ error }

func (e lockTimeout) Unwrap() []error { return []error{e.error, project.ErrLockTimeout} }

// postgresLimits are the SQLSTATEs of a limit of the server or of the
// request, not of a record, named as PostgreSQL names the condition: a
// batch over them fails again when retried, and blaming its records would
// dead-letter good ones.
var postgresLimits = map[string]string{
	"53000": "insufficient_resources",
	"53100": "disk_full",
	"53200": "out_of_memory",
	"53300": "too_many_connections",
	"53400": "configuration_limit_exceeded",
	"54011": "too_many_columns",
	"54023": "too_many_arguments",
	"57014": "statement_timeout",
}

// kindOfCode maps a SQLSTATE to what the projector should do about it, and
// names the limit of a Limit.
func kindOfCode(code string) (project.ErrorKind, string) {
	if limit, ok := postgresLimits[code]; ok {
		return project.Limit, limit
	}
	if len(code) < 2 {
		return project.Transient, ""
	}
	switch code[:2] {
	case "22", "23", "54": // data exception, integrity violation, a value over a program limit (an index row, a string's length)
		return project.Rejected, ""
	case "28", "42", "3D", "3F": // authorization, syntax or access, missing database or schema
		return project.Fatal, ""
	}
	return project.Transient, "" // 08 connection, 40 serialization and deadlock, 57 shutdown
}

// ChunkIDs returns the chunk ids held per document.
func (s *Store) ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, `SELECT document_key, chunk_id FROM chunks WHERE document_key = ANY($1)`, keys)
	if err != nil {
		return nil, classify(fmt.Errorf("list chunk ids: %w", err))
	}
	out := make(map[string][]uuid.UUID, len(keys))
	var (
		key string
		id  uuid.UUID
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &id}, func() error {
		out[key] = append(out[key], id)
		return nil
	})
	if err != nil {
		return nil, classify(fmt.Errorf("list chunk ids: %w", err))
	}
	return out, nil
}
