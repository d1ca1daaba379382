package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/keys"
)

// cli runs a one-shot subcommand of the projector binary and returns its
// standard output and error and its exit status.
func (w *world) cli(args ...string) (stdout, stderr string, code int) {
	w.t.Helper()
	return w.cliEnv(nil, args...)
}

// cliEnv is cli with extra environment (KEY=VALUE).
func (w *world) cliEnv(extraEnv []string, args ...string) (stdout, stderr string, code int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		w.t.Fatalf("projector %s: %v", args[0], err)
	}
	return out.String(), errOut.String(), code
}

// storeFlags are the flags that point a one-shot command at this world's
// stores; the servers' addresses come from the PROJECTOR_* environment.
func (w *world) storeFlags() []string {
	return []string{"--qdrant-collection", w.collection, "--postgres-schema", w.schema}
}

// reconcileLine is one line of `projector reconcile --json`.
type reconcileLine struct {
	Type        string `json:"type"`
	Store       string `json:"store"`
	Class       string `json:"class"`
	DocumentKey string `json:"document_key"`
	Status      string `json:"status"`
	Missing     int    `json:"missing"`
	Extra       int    `json:"extra"`
	Action      string `json:"action"`
	Documents   int64  `json:"documents"`
	Total       int64  `json:"total"`
	Unresolved  int64  `json:"unresolved"`
}

// reconciled is what one reconcile run reported.
type reconciled struct {
	found   []reconcileLine
	summary reconcileLine
	code    int
	stderr  string
}

// brief lists the discrepancies as "store class key action" lines, keys
// without the world's prefix.
func (r reconciled) brief(prefix string) []string {
	var out []string
	for _, d := range r.found {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", d.Store, d.Class, strings.TrimPrefix(d.DocumentKey, prefix), d.Action)))
	}
	return out
}

// reconcileArgs are the arguments of `projector reconcile --json` on this world.
func (w *world) reconcileArgs() []string {
	return append([]string{"reconcile", "--json", "--key-prefix", w.prefix, "--brokers", w.brokers, "--group", w.group}, w.storeFlags()...)
}

// reconcile runs `projector reconcile --json` on this world with extra flags.
func (w *world) reconcile(extra ...string) reconciled {
	w.t.Helper()
	stdout, stderr, code := w.cli(append(w.reconcileArgs(), extra...)...)
	r := reconciled{code: code, stderr: stderr}
	for _, line := range scanLines(stdout) {
		var l reconcileLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			w.t.Fatalf("reconcile printed %q, not a JSON line: %v\nstderr: %s", line, err, stderr)
		}
		if l.Type == "summary" {
			r.summary = l
			continue
		}
		r.found = append(r.found, l)
	}
	if r.summary.Type != "summary" {
		w.t.Fatalf("reconcile printed no summary (exit %d):\n%s\nstderr: %s", code, stdout, stderr)
	}
	return r
}

// requireClean requires a reconcile run that finds nothing and exits 0.
func (w *world) requireClean(docs int64) {
	w.t.Helper()
	r := w.reconcile()
	if r.code != 0 || len(r.found) != 0 || r.summary.Documents != docs {
		w.t.Fatalf("reconcile = exit %d, %v, %d documents; want exit 0, no discrepancies, %d documents\nstderr: %s",
			r.code, r.brief(w.prefix), r.summary.Documents, docs, r.stderr)
	}
}

// pgExec runs a statement in the world's schema.
func (w *world) pgExec(sql string, args ...any) {
	w.t.Helper()
	ctx := context.Background()
	conn, err := w.pg.Acquire(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{w.schema}.Sanitize()); err != nil {
		w.t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET search_path") }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

// cypher runs a statement against the shared graph.
func (w *world) cypher(query string, params map[string]any) {
	w.t.Helper()
	if _, err := neo4j.ExecuteQuery(context.Background(), w.neo, query, params, neo4j.EagerResultTransformer); err != nil {
		w.t.Fatalf("%s: %v", query, err)
	}
}

// upsertPoint writes a point into the world's collection behind the
// projector's back.
func (w *world) upsertPoint(id uuid.UUID, key string, version int64) {
	w.t.Helper()
	payload, err := qdrant.TryValueMap(map[string]any{"document_key": key, "version": version, "ordinal": int64(0), "text": "written by hand"})
	if err != nil {
		w.t.Fatal(err)
	}
	vec := make([]float32, 384)
	vec[0] = 1
	_, err = w.qd.Upsert(context.Background(), &qdrant.UpsertPoints{CollectionName: w.collection, Wait: qdrant.PtrOf(true),
		Points: []*qdrant.PointStruct{{Id: qdrant.NewIDUUID(id.String()), Vectors: qdrant.NewVectorsDense(vec), Payload: payload}}})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) deletePoint(id uuid.UUID) {
	w.t.Helper()
	_, err := w.qd.Delete(context.Background(), &qdrant.DeletePoints{CollectionName: w.collection, Wait: qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelector(qdrant.NewIDUUID(id.String()))})
	if err != nil {
		w.t.Fatal(err)
	}
}

// TestReconcile projects a few documents, then breaks one store at a time
// in one way and requires reconcile to report exactly that, --repair (or
// --delete-orphans) to fix it, the next run to be clean, and every store to
// be byte for byte what the projection left.
func TestReconcile(t *testing.T) {
	w := newWorld(t, 2)
	docs := []doc{
		{Key: w.key("a"), Version: 1, Title: "A", Chunks: []string{"a one", "a two"}},
		{Key: w.key("b"), Version: 1, Title: "B", Chunks: []string{"b one", "b two"}},
		{Key: w.key("w"), Version: 1, Title: "W", Chunks: []string{"w one"}},
		{Key: w.key("a"), Version: 2, Title: "A2", Chunks: []string{"a2 one", "a2 two", "a2 three"}},
		{Key: w.key("w"), Version: 2, Withdraw: true},
	}
	for i := range 5 {
		docs = append(docs, doc{Key: w.key(fmt.Sprintf("f%d", i)), Version: 1, Title: "F", Chunks: []string{"filler"}})
	}
	w.publishFile(lines(docs))
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)

	// A repair runs under a live projector, which waits for its lease, and
	// says so.
	if _, stderr, code := w.cli(append(w.reconcileArgs(), "--repair")...); code != 0 || !strings.Contains(stderr, `"members":1`) {
		t.Errorf("reconcile --repair with a running projector: exit %d, stderr %q; want exit 0 naming 1 live member", code, stderr)
	}
	p.stop()
	const total = 8 // a, b, w and f0..f4
	w.requireClean(total)
	clean := w.snapshot()

	a, b, wd := w.key("a"), w.key("b"), w.key("w")
	ghost := w.key("ghost")
	foreign := uuid.MustParse("00000000-0000-4000-8000-0000000000aa")
	var savedRow string

	tests := []struct {
		name   string
		damage func()
		want   []string
		// fix is the flag that resolves it; restore undoes what no flag can.
		fix     string
		restore func()
		// unresolved is what remains after --repair alone.
		unresolved []string
	}{
		{
			name:   "index lacks a point",
			damage: func() { w.deletePoint(keys.ChunkID(a, 2, 1)) },
			want:   []string{"index missing a"}, fix: "--repair",
		},
		{
			name: "graph lacks a chunk",
			damage: func() {
				w.cypher(`MATCH (c:Chunk {id: $id}) DETACH DELETE c`, map[string]any{"id": keys.ChunkID(b, 1, 0).String()})
			},
			want: []string{"graph missing b"}, fix: "--repair",
		},
		{
			// The relational copy is the repair's source, so it cannot
			// give these rows back; the event in the log can. The
			// snapshot check below requires the rows rebuilt byte for byte.
			name:   "relational lacks every chunk row of a document: rebuilt from the log",
			damage: func() { w.pgExec(`DELETE FROM chunks WHERE document_key = $1`, a) },
			want:   []string{"relational missing a"}, fix: "--repair",
		},
		{
			name: "relational lacks a chunk row, and the log no longer holds the event",
			damage: func() {
				id := keys.ChunkID(b, 1, 0)
				err := w.pg.QueryRow(context.Background(), "SELECT to_jsonb(c)::text FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize()+" c WHERE chunk_id = $1", id).Scan(&savedRow)
				if err != nil {
					t.Fatal(err)
				}
				w.pgExec(`DELETE FROM chunks WHERE chunk_id = $1`, id)
				w.pgExec(`UPDATE documents SET source_offset = source_offset + 1000000 WHERE document_key = $1`, b)
			},
			want: []string{"relational missing b"}, fix: "--repair",
			unresolved: []string{"relational missing b unrepairable"},
			restore: func() {
				w.pgExec(`INSERT INTO chunks SELECT * FROM jsonb_populate_record(NULL::chunks, $1::jsonb)`, savedRow)
				w.pgExec(`UPDATE documents SET source_offset = source_offset - 1000000 WHERE document_key = $1`, b)
			},
		},
		{
			name:   "graph document at another version",
			damage: func() { w.cypher(`MATCH (d:Document {key: $k}) SET d.version = 1`, map[string]any{"k": a}) },
			want:   []string{"graph version_skew a"}, fix: "--repair",
		},
		{
			name:   "index holds a withdrawn document",
			damage: func() { w.upsertPoint(keys.ChunkID(wd, 1, 0), wd, 1) },
			want:   []string{"index withdrawn_present w"}, fix: "--repair",
		},
		{
			name:   "index holds a foreign point of a live document",
			damage: func() { w.upsertPoint(foreign, b, 1) },
			want:   []string{"index orphaned b"}, fix: "--delete-orphans",
			unresolved: []string{"index orphaned b"},
		},
		{
			name:   "index holds an unknown document",
			damage: func() { w.upsertPoint(keys.ChunkID(ghost, 1, 0), ghost, 1) },
			want:   []string{"index orphaned ghost"}, fix: "--delete-orphans",
			unresolved: []string{"index orphaned ghost"},
		},
		{
			name: "graph holds an unknown document",
			damage: func() {
				w.cypher(`CREATE (d:Document {key: $k, version: 1})-[:HAS_CHUNK]->(:Chunk {id: $id, document_key: $k, version: 1})`,
					map[string]any{"k": ghost, "id": keys.ChunkID(ghost, 1, 0).String()})
			},
			want: []string{"graph orphaned ghost"}, fix: "--delete-orphans",
			unresolved: []string{"graph orphaned ghost"},
		},
		{
			name: "relational holds chunk rows of an unknown document",
			damage: func() {
				w.pgExec(`INSERT INTO chunks (chunk_id, document_key, version, ordinal, text, vector) VALUES ($1, $2, 1, 0, 'by hand', '')`, keys.ChunkID(ghost, 1, 0), ghost)
			},
			want: []string{"relational orphaned ghost"}, fix: "--delete-orphans",
			unresolved: []string{"relational orphaned ghost"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.damage()
			r := w.reconcile()
			if got := r.brief(w.prefix); fmt.Sprint(got) != fmt.Sprint(tt.want) || r.code != 3 || r.summary.Unresolved != int64(len(tt.want)) {
				t.Fatalf("reconcile = exit %d, %v (%d unresolved); want exit 3, %v\nstderr: %s", r.code, got, r.summary.Unresolved, tt.want, r.stderr)
			}
			// The CronJob's run reports the same and succeeds, so that only
			// ProjectorReconcileDiscrepancies says so, not a failed Job too.
			if r := w.reconcile("--fail-on-discrepancies=false"); fmt.Sprint(r.brief(w.prefix)) != fmt.Sprint(tt.want) || r.code != 0 {
				t.Errorf("reconcile --fail-on-discrepancies=false = exit %d, %v; want exit 0, %v", r.code, r.brief(w.prefix), tt.want)
			}
			if tt.fix != "--repair" || tt.unresolved != nil {
				r := w.reconcile("--repair")
				if got := r.brief(w.prefix); fmt.Sprint(got) != fmt.Sprint(tt.unresolved) || r.code != 3 {
					t.Errorf("reconcile --repair = exit %d, %v; want exit 3, %v", r.code, got, tt.unresolved)
				}
			}
			if tt.restore != nil {
				tt.restore()
			} else {
				r := w.reconcile(tt.fix)
				if r.code != 0 || r.summary.Unresolved != 0 || len(r.found) != len(tt.want) {
					t.Errorf("reconcile %s = exit %d, %v; want exit 0 with every discrepancy resolved", tt.fix, r.code, r.brief(w.prefix))
				}
			}
			w.requireClean(total)
			requireSameSnapshot(t, w.snapshot(), clean)
		})
	}

	t.Run("ids --check", func(t *testing.T) {
		args := append([]string{"ids", "--check"}, w.storeFlags()...)
		stdout, stderr, code := w.cli(append(args, a, "2", "3")...)
		if code != 0 || strings.Count(stdout, "index=yes graph=yes relational=yes") != 3 {
			t.Errorf("ids --check = exit %d:\n%s%s\nwant exit 0 and every id in every store", code, stdout, stderr)
		}
		w.deletePoint(keys.ChunkID(a, 2, 1))
		defer w.reconcile("--repair")
		stdout, _, code = w.cli(append(args, a, "2", "3")...)
		want := keys.ChunkID(a, 2, 1).String() + "  index=no graph=yes relational=yes"
		if code != 3 || !strings.Contains(stdout, want) || strings.Count(stdout, "=no") != 1 {
			t.Errorf("ids --check after deleting a point = exit %d:\n%s\nwant exit 3 and the line %q", code, stdout, want)
		}
	})

	t.Run("table, metrics file and progress", func(t *testing.T) {
		w.upsertPoint(keys.ChunkID(ghost, 1, 0), ghost, 1)
		defer w.reconcile("--delete-orphans")
		metricsFile := filepath.Join(t.TempDir(), "reconcile.prom")
		args := append([]string{"reconcile", "--key-prefix", w.prefix, "--metrics-file", metricsFile, "--progress-every", "3",
			"--page-size", "3", "--max-discrepancies", "1"}, w.storeFlags()...)
		stdout, stderr, code := w.cli(args...)
		var lines []string
		for _, l := range scanLines(stdout) {
			if !strings.HasPrefix(l, " ") {
				lines = append(lines, l)
			}
		}
		if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "STORE") || !strings.Contains(lines[1], "orphaned") ||
			!strings.HasPrefix(lines[2], "summary documents=8 unknown_keys=1 total=1 ") || !strings.Contains(lines[2], " index.orphaned=1 ") {
			t.Errorf("reconcile table (exit %d):\n%s\nwant exit 0 (1 is within --max-discrepancies), a header, one orphaned line and the summary", code, stdout)
		}
		if strings.Count(stderr, "reconcile progress") != 2 {
			t.Errorf("stderr:\n%s\nwant two progress lines (8 documents, one every 3)", stderr)
		}
		f, err := os.Open(metricsFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m := parseMetrics(t, f)
		if m[`projector_reconcile_discrepancies{class="orphaned",store="index"}`] != 1 || m[`projector_reconcile_discrepancies{class="missing",store="graph"}`] != 0 ||
			m["projector_reconcile_documents"] != 8 || time.Since(time.Unix(int64(m["projector_reconcile_last_run_timestamp_seconds"]), 0)) > time.Minute {
			t.Errorf("metrics file = %v, want 1 index orphan, 0 elsewhere, 8 documents and a recent timestamp", m)
		}
		if _, ok := m[`projector_reconcile_discrepancies{class="withdrawn_present",store="relational"}`]; !ok {
			t.Errorf("metrics file lacks the zero series of relational withdrawn_present: %v", m)
		}
	})

	t.Run("since", func(t *testing.T) {
		r := w.reconcile("--since", time.Now().Add(time.Hour).Format(time.RFC3339))
		if r.code != 0 || r.summary.Documents != 0 {
			t.Errorf("reconcile --since in the future = exit %d, %d documents; want 0 and 0", r.code, r.summary.Documents)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{{"--since", "yesterday"}, {"--page-size", "0"}, {"--max-discrepancies", "-1"}, {"--nope"}} {
			if _, stderr, code := w.cli(append([]string{"reconcile"}, args...)...); code != 2 {
				t.Errorf("reconcile %v = exit %d (%s), want 2", args, code, strings.TrimSpace(stderr))
			}
		}
	})

	t.Run("ledger-prune keeps the rows of current versions", func(t *testing.T) {
		w.pgExec(`UPDATE ledger SET projected_at = now() - interval '40 days'`)
		stdout, stderr, code := w.cli("ledger-prune", "--postgres-schema", w.schema, "--batch", "2")
		// a v1 and w v1 go; a v2, b v1, w v2 (the withdrawal) and f0..f4 stay.
		if code != 0 || !strings.Contains(stdout, "deleted 2 ledger rows") {
			t.Errorf("ledger-prune = exit %d, %q %q; want exit 0 and 2 rows deleted", code, stdout, stderr)
		}
		var left, current int
		err := w.pg.QueryRow(context.Background(), "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM "+
			pgx.Identifier{w.schema, "documents"}.Sanitize()+" d WHERE d.document_key = l.document_key AND d.version = l.version)) FROM "+
			pgx.Identifier{w.schema, "ledger"}.Sanitize()+" l").Scan(&left, &current)
		if err != nil {
			t.Fatal(err)
		}
		if left != total || current != total {
			t.Errorf("ledger holds %d rows, %d of current versions; want %d and %d", left, current, total, total)
		}
		if _, _, code := w.cli("ledger-prune", "--retention", "0s"); code != 2 {
			t.Errorf("ledger-prune --retention 0s = exit %d, want 2", code)
		}
	})
}

// TestReconcileBeforeTheStoresArePrepared: on stores nothing has been
// projected to yet (a fresh deployment, or the default names after the
// tests), reconcile says what is missing and what to run, and reports no
// "no discrepancies" for a comparison it never made; once `projector
// migrate` has prepared them, it finds empty stores consistent.
func TestReconcileBeforeTheStoresArePrepared(t *testing.T) {
	w := newWorld(t, 1)
	for _, output := range [][]string{nil, {"--json"}} {
		args := append([]string{"reconcile", "--key-prefix", w.prefix, "--brokers", w.brokers, "--group", w.group}, w.storeFlags()...)
		stdout, stderr, code := w.cli(append(args, output...)...)
		if code != 1 || !strings.Contains(stderr, w.collection) || !strings.Contains(stderr, "projector migrate") {
			t.Errorf("reconcile %v on unprepared stores: exit %d, stderr %q; want exit 1 naming collection %s and `projector migrate`", output, code, stderr, w.collection)
		}
		if strings.Contains(stdout, "no discrepancies") || strings.Contains(stdout, `"type":"summary"`) {
			t.Errorf("reconcile %v on unprepared stores reported a comparison it did not make: %q", output, stdout)
		}
	}
	if _, stderr, code := w.cli(append([]string{"migrate"}, w.storeFlags()...)...); code != 0 {
		t.Fatalf("projector migrate: exit %d, %s", code, stderr)
	}
	stdout, stderr, code := w.cli(append([]string{"reconcile", "--key-prefix", w.prefix, "--brokers", w.brokers, "--group", w.group}, w.storeFlags()...)...)
	if code != 0 || !strings.Contains(stdout, "no discrepancies") {
		t.Errorf("reconcile on prepared, empty stores: exit %d, stdout %q, stderr %q; want exit 0 and no discrepancies", code, stdout, stderr)
	}
}
