package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

// openTest opens a store in a fresh schema that is dropped after the test.
func openTest(t testing.TB) *Store {
	t.Helper()
	s, _ := openUnmigrated(t)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// openUnmigrated opens a store on a schema name that is dropped after the
// test, without creating anything, and returns the schema's name.
func openUnmigrated(t testing.TB) (*Store, string) {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	schema := fmt.Sprintf("test_%d", time.Now().UnixNano())
	s, err := Open(ctx, dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		testenv.Missing(t, "PostgreSQL", err.Error())
	}
	t.Cleanup(func() {
		_, _ = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		s.Close()
	})
	return s, schema
}

type relationalUnderTest struct{ *Store }

func (r relationalUnderTest) Apply(ctx context.Context, w *project.Write) error {
	return r.Store.Apply(ctx, w, nil)
}

func TestConformance(t *testing.T) {
	s := openTest(t)
	storetest.Run(t, relationalUnderTest{s}, "pg-", storetest.RefusesLate)
}

func TestMigrateIsIdempotent(t *testing.T) {
	s := openTest(t)
	for i := 0; i < 2; i++ {
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("Migrate again (%d): %v", i, err)
		}
	}
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations) {
		t.Errorf("schema_migrations rows = %d, want %d", n, len(migrations))
	}
}

// TestSchemaGuard plays a rollback: a newer build has migrated the schema
// one version past this build's, and this build must refuse to write it.
func TestSchemaGuard(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema of a schema at this build's version: %v, want nil", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func(context.Context) error{"Migrate": s.Migrate, "CheckSchema": s.CheckSchema} {
		err := check(ctx)
		var schemaErr *SchemaError
		if !errors.As(err, &schemaErr) || schemaErr.Have != SchemaVersion()+1 || schemaErr.Want != SchemaVersion() {
			t.Fatalf("%s of a newer schema: %v, want a SchemaError with versions %d and %d", name, err, SchemaVersion()+1, SchemaVersion())
		}
		if project.KindOf(err) != project.Fatal {
			t.Errorf("%s of a newer schema: kind %s, want fatal", name, project.KindOf(err))
		}
		if !strings.Contains(err.Error(), "newer than this build") {
			t.Errorf("%s: %q does not say the schema is newer than the build", name, err)
		}
	}
}

// TestCheckSchemaChangesNothing requires that a build told not to migrate
// refuses an empty schema without creating anything in it.
func TestCheckSchemaChangesNothing(t *testing.T) {
	ctx := context.Background()
	schema := fmt.Sprintf("test_check_%d", time.Now().UnixNano())
	s, err := Open(ctx, testenv.PostgresDSN(t), schema)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		testenv.Missing(t, "PostgreSQL", err.Error())
	}
	err = s.CheckSchema(ctx)
	var schemaErr *SchemaError
	if !errors.As(err, &schemaErr) || schemaErr.Have != 0 {
		t.Fatalf("CheckSchema of a missing schema: %v, want a SchemaError at version 0", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("CheckSchema created schema %s", schema)
	}
}

func TestStatesAndLedger(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	doc := storetest.Doc("d", 3, "x", "y")
	ledger := []project.LedgerEntry{{
		IdempotencyKey: "document:d:v3:upsert", DocumentKey: "d", Version: 3, Op: "upsert",
		ContentHash: doc.ContentHash, ChunkCount: 2, Topic: "documents", Partition: 1, Offset: 42, Writer: "w1",
	}}
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}, Withdrawn: []project.Withdrawal{{Key: "gone", Version: 7}}}, ledger); err != nil {
		t.Fatal(err)
	}
	states, err := s.States(ctx, project.Fence{}, []string{"d", "gone", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]project.State{
		"d":    {Version: 3, ContentHash: doc.ContentHash},
		"gone": {Version: 7, Withdrawn: true},
	}
	if len(states) != len(want) || states["d"] != want["d"] || states["gone"] != want["gone"] {
		t.Errorf("States = %v, want %v", states, want)
	}
	// A redelivery must not rewrite the ledger row nor the document row.
	var before, after time.Time
	_ = s.pool.QueryRow(ctx, `SELECT updated_at FROM documents WHERE document_key = 'd'`).Scan(&before)
	ledger[0].Offset, ledger[0].Writer = 99, "w2"
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}}, ledger); err != nil {
		t.Fatal(err)
	}
	_ = s.pool.QueryRow(ctx, `SELECT updated_at FROM documents WHERE document_key = 'd'`).Scan(&after)
	if !after.Equal(before) {
		t.Errorf("updated_at moved from %v to %v on a redelivery, want unchanged", before, after)
	}
	var offset int64
	var writer string
	if err := s.pool.QueryRow(ctx, `SELECT source_offset, writer FROM ledger WHERE idempotency_key = 'document:d:v3:upsert'`).Scan(&offset, &writer); err != nil {
		t.Fatal(err)
	}
	if offset != 42 || writer != "w1" {
		t.Errorf("ledger row = offset %d writer %s, want the first projection's (42, w1)", offset, writer)
	}
}

func TestVectorRoundTrip(t *testing.T) {
	v := []float32{0, -1.5, 3.25e-7, 1e30}
	got, err := DecodeVector(EncodeVector(v))
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		if got[i] != v[i] {
			t.Fatalf("DecodeVector(EncodeVector(%v)) = %v", v, got)
		}
	}
	if _, err := DecodeVector([]byte{1, 2, 3}); err == nil {
		t.Error("DecodeVector of 3 bytes succeeded, want an error")
	}
}

// TestClassify maps errors with the SQLSTATEs and messages PostgreSQL
// sends, captured from the real server, to what the projector does.
func TestClassify(t *testing.T) {
	tests := []struct {
		code, msg string
		want      project.ErrorKind
		limit     string
	}{
		{"40001", "could not serialize access due to concurrent update", project.Transient, ""},
		{"40P01", "deadlock detected", project.Transient, ""},
		{"57P01", "terminating connection due to administrator command", project.Transient, ""},
		{"22021", `invalid byte sequence for encoding "UTF8": 0x00`, project.Rejected, ""},
		{"22P05", "unsupported Unicode escape sequence", project.Rejected, ""},
		{"23505", `duplicate key value violates unique constraint "chunks_pkey"`, project.Rejected, ""},
		{"54000", "index row requires 12816 bytes, maximum size is 8191", project.Rejected, ""},
		{"54000", "requested length too large", project.Rejected, ""},
		{"57014", "canceling statement due to statement timeout", project.Limit, "statement_timeout"},
		{"57014", "canceling statement due to user request", project.Transient, ""},
		{"53200", "out of memory", project.Limit, "out_of_memory"},
		{"53100", `could not extend file "base/16384/16385": No space left on device`, project.Limit, "disk_full"},
		{"53300", "sorry, too many clients already", project.Limit, "too_many_connections"},
		{"28P01", `password authentication failed for user "projector"`, project.Fatal, ""},
		{"42501", "permission denied for table chunks", project.Fatal, ""},
		{"42P01", `relation "chunks" does not exist`, project.Fatal, ""},
		{"3D000", `database "x" does not exist`, project.Fatal, ""},
	}
	for _, tt := range tests {
		err := classify(fmt.Errorf("write batch: %w", &pgconn.PgError{Code: tt.code, Message: tt.msg}))
		if got := project.KindOf(err); got != tt.want {
			t.Errorf("kind of %s %q = %s, want %s", tt.code, tt.msg, got, tt.want)
		}
		if got := project.LimitOf(err); got != tt.limit {
			t.Errorf("limit of %s %q = %q, want %q", tt.code, tt.msg, got, tt.limit)
		}
	}
}

// TestDocumentsOnlyMoveForward: the documents row keeps the position of the
// event that last changed it, and a late write (an older version, an
// earlier offset of the same log, a live write over a withdrawal of the
// same version) leaves the row as it is.
func TestDocumentsOnlyMoveForward(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	pos := func(offset int64) project.Position {
		return project.Position{Topic: "documents", TopicID: project.TopicID{7}, Partition: 1, Offset: offset}
	}
	live := func(version, offset int64, texts ...string) project.Write {
		d := storetest.Doc("d", version, texts...)
		d.Position = pos(offset)
		return project.Write{Live: []project.Document{d}}
	}
	withdrawn := func(version, offset int64) project.Write {
		return project.Write{Withdrawn: []project.Withdrawal{{Key: "d", Version: version, Position: pos(offset)}}}
	}
	steps := []struct {
		name   string
		write  project.Write
		want   project.State
		chunks int
	}{
		{"first version", live(2, 10, "a", "b"), project.State{Version: 2, ContentHash: storetest.Doc("d", 2, "a", "b").ContentHash, Position: pos(10)}, 2},
		{"an older version's late write", live(1, 5, "x"), project.State{Version: 2, ContentHash: storetest.Doc("d", 2, "a", "b").ContentHash, Position: pos(10)}, 2},
		{"an older version's late withdrawal", withdrawn(1, 6), project.State{Version: 2, ContentHash: storetest.Doc("d", 2, "a", "b").ContentHash, Position: pos(10)}, 2},
		{"a tombstone withdraws at its place", withdrawn(2, 11), project.State{Version: 2, Withdrawn: true, Position: pos(11)}, 0},
		{"a late live write of the withdrawn version", live(2, 10, "a", "b"), project.State{Version: 2, Withdrawn: true, Position: pos(11)}, 0},
		{"a revival", live(3, 12, "c"), project.State{Version: 3, ContentHash: storetest.Doc("d", 3, "c").ContentHash, Position: pos(12)}, 1},
	}
	for _, st := range steps {
		if err := s.Apply(ctx, &st.write, nil); err != nil {
			t.Fatalf("%s: Apply: %v", st.name, err)
		}
		states, err := s.States(ctx, project.Fence{}, []string{"d"})
		if err != nil {
			t.Fatal(err)
		}
		if got := states["d"]; got != st.want {
			t.Errorf("%s: state = %+v, want %+v", st.name, got, st.want)
		}
		counts, err := s.ChunkCounts(ctx, []string{"d"})
		if err != nil {
			t.Fatal(err)
		}
		if counts["d"] != st.chunks {
			t.Errorf("%s: %d chunks, want %d", st.name, counts["d"], st.chunks)
		}
	}
}

// TestMigrateUpgradesPositions: a schema made before documents kept their
// position gets, from the ledger, the position of each document's latest
// event, so a tombstone before a revival stays a redelivery after the
// upgrade.
func TestMigrateUpgradesPositions(t *testing.T) {
	s, schema := openUnmigrated(t)
	ctx := context.Background()
	old := []string{"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
		migrations[0], migrations[1], `INSERT INTO schema_migrations (version) VALUES (1), (2)`,
		`INSERT INTO documents (document_key, version, status, content_hash, title, source, chunk_count, correlation_id)
			VALUES ('d', 3, 'live', 'h', '', '', 1, ''), ('never', 1, 'live', 'h', '', '', 0, '')`,
		`INSERT INTO ledger (idempotency_key, document_key, version, op, content_hash, chunk_count, source_topic, source_partition, source_offset, correlation_id, writer, projected_at)
			VALUES ('document:d:v2:withdraw', 'd', 2, 'withdraw', '', 0, 'documents', 1, 10, '', 'w', now() - interval '1 minute'),
			       ('document:d:v3:upsert', 'd', 3, 'upsert', 'h', 1, 'documents', 1, 11, '', 'w', now())`,
	}
	for _, stmt := range old {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("old schema: %v", err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	states, err := s.States(ctx, project.Fence{}, []string{"d", "never"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]project.State{
		"d":     {Version: 3, ContentHash: "h", Position: project.Position{Topic: "documents", Partition: 1, Offset: 11}},
		"never": {Version: 1, ContentHash: "h"},
	}
	for key, w := range want {
		if got := states[key]; got != w {
			t.Errorf("state of %q after the upgrade = %+v, want %+v", key, got, w)
		}
	}
}

// TestMigrateMarksChunkVectorsOfGeneration1: the chunk rows of a schema
// from before generations hold the vectors of the embedder that becomes
// generation 1, and say so after the upgrade; rows written after it say
// what their write says.
func TestMigrateMarksChunkVectorsOfGeneration1(t *testing.T) {
	s, schema := openUnmigrated(t)
	ctx := context.Background()
	old := []string{"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`}
	old = append(old, migrations[:6]...)
	old = append(old, `INSERT INTO schema_migrations (version) VALUES (1), (2), (3), (4), (5), (6)`,
		`INSERT INTO chunks (chunk_id, document_key, version, ordinal, text, vector) VALUES (gen_random_uuid(), 'd', 1, 0, 't', '\x'::bytea)`)
	for _, stmt := range old {
		if _, err := s.pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("old schema: %v", err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT vector_generation FROM chunks WHERE document_key = 'd'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("vector_generation of a row from before generations = %d, %v; want 1", n, err)
	}
	// A row written by hand: its vector's generation is not known.
	if err := s.pool.QueryRow(ctx, `INSERT INTO chunks (chunk_id, document_key, version, ordinal, text, vector) VALUES (gen_random_uuid(), 'e', 1, 0, 't', '\x'::bytea)
RETURNING vector_generation`).Scan(&n); err != nil || n != 0 {
		t.Errorf("vector_generation of a row written by hand = %d, %v; want 0, unknown", n, err)
	}
}
