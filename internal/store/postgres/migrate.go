package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
)

// migrations are applied in order, each once, recorded in
// schema_migrations. Append new ones; never edit one that has shipped.
var migrations = []string{
	// 1: the contract's tables.
	`
CREATE TABLE documents (
	document_key   text PRIMARY KEY,
	version        bigint NOT NULL,
	status         text NOT NULL CHECK (status IN ('live', 'withdrawn')),
	content_hash   text NOT NULL,
	title          text NOT NULL,
	source         text NOT NULL,
	metadata       jsonb,
	chunk_count    integer NOT NULL,
	correlation_id text NOT NULL,
	updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_updated_at ON documents (updated_at);

CREATE TABLE chunks (
	chunk_id     uuid PRIMARY KEY,
	document_key text NOT NULL,
	version      bigint NOT NULL,
	ordinal      integer NOT NULL,
	text         text NOT NULL,
	metadata     jsonb,
	vector       bytea NOT NULL
);
CREATE INDEX chunks_document_key ON chunks (document_key);

CREATE TABLE ledger (
	idempotency_key  text PRIMARY KEY,
	document_key     text NOT NULL,
	version          bigint NOT NULL,
	op               text NOT NULL CHECK (op IN ('upsert', 'withdraw')),
	content_hash     text NOT NULL,
	chunk_count      integer NOT NULL,
	source_topic     text NOT NULL,
	source_partition integer NOT NULL,
	source_offset    bigint NOT NULL,
	correlation_id   text NOT NULL,
	writer           text NOT NULL,
	projected_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_document_version ON ledger (document_key, version);
CREATE INDEX ledger_projected_at ON ledger (projected_at);
`,
	// 2: the embedding cache (embedcache.go).
	`
CREATE TABLE embedding_cache (
	model       text NOT NULL,
	dim         integer NOT NULL,
	text_sha256 bytea NOT NULL,
	vector      bytea NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (model, dim, text_sha256)
);
`,
	// 3: the log position of the event that last changed each document, so
	// a tombstone (which carries no version) read again is known as a
	// redelivery. Existing documents take the position of their latest
	// ledger row: at or after the event that last changed them, never
	// before it, so no tombstone before a revival is taken as new; their
	// topic id stays unknown (NULL), which compares by topic name.
	`
ALTER TABLE documents
	ADD COLUMN source_topic     text,
	ADD COLUMN source_topic_id  uuid,
	ADD COLUMN source_partition integer,
	ADD COLUMN source_offset    bigint;
UPDATE documents d SET (source_topic, source_partition, source_offset) = (
	SELECT l.source_topic, l.source_partition, l.source_offset FROM ledger l
	WHERE l.document_key = d.document_key
	ORDER BY l.projected_at DESC, l.source_offset DESC LIMIT 1);
`,
	// 4: the fencing token of each partition's writer (fence.go): it grows
	// with every assignment of the partition, and a write under an older
	// token is refused.
	`
CREATE TABLE partition_writers (
	source_topic     text NOT NULL,
	source_partition integer NOT NULL,
	token            bigint NOT NULL,
	writer           text NOT NULL,
	assigned_at      timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (source_topic, source_partition)
);
`,
	// 5: the repair lease (lease.go), a row instead of a session's advisory
	// lock, so that a dropped connection or a transaction-mode pooler
	// cannot end it unnoticed.
	`
CREATE TABLE repair_lease (
	id         boolean PRIMARY KEY DEFAULT true CHECK (id),
	token      bigint NOT NULL DEFAULT 0,
	holder     text NOT NULL DEFAULT '',
	expires_at timestamptz
);
INSERT INTO repair_lease DEFAULT VALUES;
`,
	// 6: the index's late window after a partition changes hands
	// (fence.go): whether the partition's last writer released it, until
	// when an index write of an earlier owner may still land, and the
	// documents written meanwhile, which the owner then settles. Existing
	// partitions count as not released: their next owner settles once.
	`
ALTER TABLE partition_writers
	ADD COLUMN released   boolean NOT NULL DEFAULT false,
	ADD COLUMN late_until timestamptz;
CREATE TABLE index_settle (
	source_topic     text NOT NULL,
	source_partition integer NOT NULL,
	document_key     text NOT NULL,
	PRIMARY KEY (source_topic, source_partition, document_key)
);
`,
	// 7: the registry of index generations (generations.go), per
	// collection alias: each a physical collection with its embedder, one
	// of them live, which the readers' alias points at, with its fill's progress and
	// the lease of the one fill that may write it; and the epoch of the
	// set of generations run writes, which every change of that set
	// raises; and, per chunk row, the generation whose embedder made its
	// vector, so that a vector read back is written to that generation
	// only (after a switch the rows keep the old model's vectors until
	// their documents are written again).
	// Empty: the first migrate or run registers generation 1.
	`
CREATE TABLE index_generations (
	alias          text NOT NULL,
	generation     integer NOT NULL CHECK (generation >= 1),
	collection     text NOT NULL UNIQUE,
	embedder       text NOT NULL,
	model          text NOT NULL,
	embed_url      text NOT NULL,
	dim            integer NOT NULL CHECK (dim > 0),
	distance       text NOT NULL,
	state          text NOT NULL CHECK (state IN ('building', 'live', 'retiring', 'retired', 'aborted')),
	fill_after     text,
	fill_documents bigint NOT NULL DEFAULT 0,
	fill_chunks    bigint NOT NULL DEFAULT 0,
	fill_done_at   timestamptz,
	fill_token     bigint NOT NULL DEFAULT 0,
	fill_until     timestamptz,
	created_at     timestamptz NOT NULL DEFAULT now(),
	switched_at    timestamptz,
	retire_after   timestamptz,
	PRIMARY KEY (alias, generation)
);
CREATE UNIQUE INDEX index_generations_one_live ON index_generations (alias) WHERE state = 'live';
-- The generation whose embedder made each chunk's vector: rows written
-- before generations hold generation 1's; a row written by anything else
-- than the projector gets 0, unknown, and is embedded again wherever it
-- is written.
ALTER TABLE chunks ADD COLUMN vector_generation integer NOT NULL DEFAULT 1;
ALTER TABLE chunks ALTER COLUMN vector_generation SET DEFAULT 0;
CREATE TABLE generation_set (
	id    boolean PRIMARY KEY DEFAULT true CHECK (id),
	epoch bigint NOT NULL DEFAULT 0
);
INSERT INTO generation_set DEFAULT VALUES;
`,
}

// migrationLock is the advisory lock key that serialises migrations when
// several projector processes start at once.
const migrationLock = 0x70726f6a // "proj"

// SchemaVersion is the schema version this build writes: the number of its
// migrations.
func SchemaVersion() int { return len(migrations) }

// SchemaError says that the schema is not at the version this build
// writes. A build must not write a schema newer than it knows (after a
// rollback, say): it would miss the columns and rules that the newer build
// relies on. Retrying cannot help, so it is fatal.
type SchemaError struct {
	Schema string
	// Have is the schema's version, Want this build's.
	Have, Want int
}

func (e *SchemaError) Error() string {
	if e.Have > e.Want {
		return fmt.Sprintf("schema %s is at version %d, newer than this build's %d: a newer projector migrated it; run that version or a newer one (docs/upgrading.md, \"Rolling back\")",
			e.Schema, e.Have, e.Want)
	}
	if e.Have == 0 {
		return fmt.Sprintf("schema %s is at version 0, older than this build's %d: nothing was projected to it yet, or --postgres-schema names another; run projector migrate first, or let run migrate (--migrate, the default)",
			e.Schema, e.Want)
	}
	return fmt.Sprintf("schema %s is at version %d, older than this build's %d: run projector migrate first, or let run migrate (--migrate, the default)",
		e.Schema, e.Have, e.Want)
}

// Migrate creates the schema and applies the migrations it lacks; a schema
// newer than this build stops it with a SchemaError. It is safe to run from
// several processes at once and on every start.
func (s *Store) Migrate(ctx context.Context) error { return s.migrate(ctx, true) }

// CheckSchema returns a SchemaError unless the schema is at exactly this
// build's version, and changes nothing: for `run --migrate=false`, where
// migrations are a step of their own (`projector migrate`).
func (s *Store) CheckSchema(ctx context.Context) error { return s.migrate(ctx, false) }

func (s *Store) migrate(ctx context.Context, apply bool) error {
	// The schema name was validated by Open; identifiers cannot be
	// parameters, so it is quoted by pgx.
	createSchema := "CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{s.schema}.Sanitize()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A migration may rightly run long (migration 3 rewrites every
		// documents row): it is not held to the writers' StatementTimeout.
		if _, err := tx.Exec(ctx, unboundedStatements); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		if apply {
			if _, err := tx.Exec(ctx, createSchema); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
		}
		var done int
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return err
		}
		if exists {
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&done); err != nil {
				return err
			}
		}
		if done > len(migrations) || (!apply && done != len(migrations)) {
			return &project.StoreError{Store: project.StoreRelational, Kind: project.Fatal,
				Err: &SchemaError{Schema: s.schema, Have: done, Want: len(migrations)}}
		}
		for i := done; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, i+1); err != nil {
				return err
			}
		}
		return nil
	})
	var schemaErr *SchemaError
	if errors.As(err, &schemaErr) {
		return err
	}
	if err != nil {
		return classify(fmt.Errorf("migrate schema %s: %w", s.schema, err))
	}
	return nil
}
