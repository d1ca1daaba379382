package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protojson"
)

// snapshot is the whole content of the world's slice of the three stores as
// sorted lines of canonical JSON, for byte-for-byte comparison.
type snapshot struct {
	index      []string
	graph      []string
	relational []string
}

func (w *world) snapshot() snapshot {
	w.t.Helper()
	return snapshot{index: w.indexLines(), graph: w.graphLines(), relational: w.relationalLines()}
}

func (w *world) indexLines() []string {
	w.t.Helper()
	ctx := context.Background()
	var lines []string
	var offset *qdrant.PointId
	for {
		pts, next, err := w.qd.ScrollAndOffset(ctx, &qdrant.ScrollPoints{
			CollectionName: w.collection, Offset: offset, Limit: qdrant.PtrOf(uint32(1000)),
			WithPayload: qdrant.NewWithPayload(true), WithVectors: qdrant.NewWithVectors(true),
		})
		if err != nil {
			w.t.Fatalf("scroll index: %v", err)
		}
		for _, p := range pts {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
			if err != nil {
				w.t.Fatal(err)
			}
			// protojson output is not guaranteed stable in whitespace;
			// re-encoding through encoding/json sorts keys and compacts.
			var v any
			_ = json.Unmarshal(b, &v)
			c, _ := json.Marshal(v)
			lines = append(lines, string(c))
		}
		if next == nil {
			break
		}
		offset = next
	}
	slices.Sort(lines)
	return lines
}

func (w *world) graphLines() []string {
	w.t.Helper()
	ctx := context.Background()
	var lines []string
	res, err := neo4j.ExecuteQuery(ctx, w.neo, `
MATCH (d:Document) WHERE d.key STARTS WITH $p
RETURN 'D' AS kind, d.key AS id, properties(d) AS props, [] AS owners`, map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		w.t.Fatalf("read graph documents: %v", err)
	}
	lines = append(lines, recordLines(w.t, res.Records)...)
	res, err = neo4j.ExecuteQuery(ctx, w.neo, `
MATCH (c:Chunk) WHERE c.document_key STARTS WITH $p
OPTIONAL MATCH (d:Document)-[:HAS_CHUNK]->(c)
RETURN 'C' AS kind, c.id AS id, properties(c) AS props, collect(d.key) AS owners`, map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		w.t.Fatalf("read graph chunks: %v", err)
	}
	lines = append(lines, recordLines(w.t, res.Records)...)
	slices.Sort(lines)
	return lines
}

func recordLines(t *testing.T, recs []*neo4j.Record) []string {
	var out []string
	for _, r := range recs {
		b, err := json.Marshal(r.AsMap())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

func (w *world) relationalLines() []string {
	w.t.Helper()
	ctx := context.Background()
	var lines []string
	for _, table := range []string{"documents", "chunks", "ledger"} {
		name := pgx.Identifier{w.schema, table}.Sanitize()
		rows, err := w.pg.Query(ctx, "SELECT to_jsonb(t)::text FROM "+name+" t")
		if err != nil {
			w.t.Fatalf("read %s: %v", table, err)
		}
		rowLines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			w.t.Fatalf("read %s: %v", table, err)
		}
		for _, l := range rowLines {
			lines = append(lines, table+" "+l)
		}
	}
	slices.Sort(lines)
	return lines
}

// requireSameSnapshot fails with the first differences between two snapshots.
func requireSameSnapshot(t *testing.T, got, want snapshot) {
	t.Helper()
	for _, s := range []struct {
		store     string
		got, want []string
	}{{"index", got.index, want.index}, {"graph", got.graph, want.graph}, {"relational", got.relational, want.relational}} {
		if slices.Equal(s.got, s.want) {
			continue
		}
		t.Errorf("%s differs: %d lines, want %d; first differences:\n%s", s.store, len(s.got), len(s.want), firstDiffs(s.got, s.want, 5))
	}
}

func firstDiffs(got, want []string, n int) string {
	in := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range list {
			m[l] = true
		}
		return m
	}
	g, wm := in(got), in(want)
	var out string
	for _, l := range got {
		if !wm[l] && n > 0 {
			out += fmt.Sprintf("  + %.300s\n", l)
			n--
		}
	}
	for _, l := range want {
		if !g[l] && n > 0 {
			out += fmt.Sprintf("  - %.300s\n", l)
			n--
		}
	}
	return out
}
