package explore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/testenv"
)

// dim is the vector dimension of the explorer's collection.
const dim = 8

// stores are the real stores one explorer run writes: its own collection
// and schema, and its own key prefix in the shared graph.
type stores struct {
	run   string
	topic string
	index *index.Store
	graph *graph.Store
	rel   *postgres.Store
	// repairRel is the repair's own connection to the relational store,
	// as a reconcile process has: the lease it takes is its own.
	repairRel *postgres.Store
	neo       neo4j.DriverWithContext
}

func openStores(t *testing.T) *stores {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	neoURI := testenv.Neo4jURI(t)
	qdAddr := testenv.QdrantAddr(t)
	ctx := context.Background()
	run := fmt.Sprintf("explore_%d", time.Now().UnixNano()%1e9)
	s := &stores{run: run, topic: "explore." + run}
	var err error
	if s.index, err = index.Open(index.Config{Addr: qdAddr, Collection: run, Dim: dim}); err != nil {
		t.Fatal(err)
	}
	user, password := "neo4j", ""
	if pw := os.Getenv("PROJECTOR_NEO4J_PASSWORD"); pw != "" {
		user, password = os.Getenv("PROJECTOR_NEO4J_USER"), pw
	}
	if s.graph, err = graph.Open(graph.Config{URI: neoURI, User: user, Password: password}); err != nil {
		t.Fatal(err)
	}
	if s.rel, err = postgres.Open(ctx, dsn, run); err != nil {
		t.Fatal(err)
	}
	if s.repairRel, err = postgres.Open(ctx, dsn, run); err != nil {
		t.Fatal(err)
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	if s.neo, err = neo4j.NewDriverWithContext(neoURI, auth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(t) })
	for _, m := range []func(context.Context) error{s.index.Migrate, s.graph.Migrate, s.rel.Migrate} {
		if err := m(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *stores) close(t *testing.T) {
	ctx := context.Background()
	_ = s.index.Client().DeleteCollection(ctx, s.run)
	_ = s.index.Close()
	if err := testenv.DeleteGraph(ctx, s.neo, s.run+"/", s.topic); err != nil {
		t.Errorf("the graph keeps nodes of the explorer: %v", err)
	}
	_ = s.neo.Close(ctx)
	_ = s.graph.Close(ctx)
	_, _ = s.rel.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.run}.Sanitize()+" CASCADE")
	s.rel.Close()
	s.repairRel.Close()
}

// snapshot is what the three stores hold of one document, as sorted lines
// of canonical JSON with everything that names the document, its
// partition, the writer or the time replaced, so two documents projected
// from the same events compare equal.
type snapshot map[string][]string

// snapshot reads key's document from every store.
func (s *stores) snapshot(ctx context.Context, key string) (snapshot, error) {
	out := snapshot{}
	n := normalizer{key: key}
	for _, q := range []string{
		`SELECT to_jsonb(d) - 'updated_at' FROM documents d WHERE document_key = $1`,
		`SELECT to_jsonb(c) FROM chunks c WHERE document_key = $1`,
		`SELECT to_jsonb(l) - 'projected_at' - 'writer' FROM ledger l WHERE document_key = $1`,
	} {
		rows, err := s.rel.Pool().Query(ctx, q, key)
		if err != nil {
			return nil, fmt.Errorf("read the relational store: %w", err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("read the relational store: %w", err)
		}
		for _, l := range lines {
			out["relational"] = append(out["relational"], n.line(l))
		}
	}
	for _, q := range []string{
		`MATCH (d:Document {key: $k}) RETURN 'document' AS node, properties(d) AS props, [] AS owners`,
		`MATCH (c:Chunk {document_key: $k}) OPTIONAL MATCH (d:Document)-[:HAS_CHUNK]->(c) RETURN 'chunk' AS node, properties(c) AS props, collect(d.key) AS owners`,
		`MATCH (t:WithdrawnDocument {key: $k}) RETURN 'tombstone' AS node, properties(t) AS props, [] AS owners`,
	} {
		res, err := neo4j.ExecuteQuery(ctx, s.neo, q, map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			return nil, fmt.Errorf("read the graph: %w", err)
		}
		for _, r := range res.Records {
			b, err := json.Marshal(r.AsMap())
			if err != nil {
				return nil, err
			}
			out["graph"] = append(out["graph"], n.line(string(b)))
		}
	}
	// The ids alone (an include of no field): what a clean delivery and a
	// case must agree on is which points are there.
	points, err := s.index.Client().Scroll(ctx, &qdrant.ScrollPoints{
		CollectionName: s.index.Collection(),
		Filter:         &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", key)}},
		Limit:          qdrant.PtrOf(uint32(1000)),
		WithPayload:    qdrant.NewWithPayloadInclude(),
		WithVectors:    qdrant.NewWithVectors(false),
	})
	if err != nil {
		return nil, fmt.Errorf("read the index: %w", err)
	}
	for _, p := range points {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
		if err != nil {
			return nil, err
		}
		out["index"] = append(out["index"], n.line(string(b)))
	}
	for _, lines := range out {
		slices.Sort(lines)
	}
	return out, nil
}

// diff describes how got differs from want, store by store; "" when equal.
func (got snapshot) diff(want snapshot) string {
	var b strings.Builder
	for _, store := range []string{"index", "graph", "relational"} {
		g, w := got[store], want[store]
		if slices.Equal(g, w) {
			continue
		}
		fmt.Fprintf(&b, "%s holds %d lines, one clean delivery %d:\n", store, len(g), len(w))
		for _, l := range g {
			if !slices.Contains(w, l) {
				fmt.Fprintf(&b, "  + %.400s\n", l)
			}
		}
		for _, l := range w {
			if !slices.Contains(g, l) {
				fmt.Fprintf(&b, "  - %.400s\n", l)
			}
		}
	}
	return b.String()
}

// normalizer rewrites one document's lines so that they no longer name it.
type normalizer struct{ key string }

// Fields that differ between two clean deliveries of the same events: who
// wrote, when, and the partition the explorer gave the case.
var unstable = []string{"updated_at", "projected_at", "writer", "withdrawn_at", "source_partition"}

func (n normalizer) line(raw string) string {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return "unparsable: " + raw
	}
	v = n.value(v)
	b, _ := json.Marshal(v)
	return string(b)
}

func (n normalizer) value(v any) any {
	switch x := v.(type) {
	case string:
		if id, err := uuid.Parse(x); err == nil {
			return n.id(id)
		}
		return strings.ReplaceAll(x, n.key, "KEY")
	case []any:
		for i := range x {
			x[i] = n.value(x[i])
		}
		return x
	case map[string]any:
		for _, f := range unstable {
			delete(x, f)
		}
		if f, ok := x["fields"].(map[string]any); ok {
			for _, u := range unstable {
				delete(f, u)
			}
		}
		for k, e := range x {
			x[k] = n.value(e)
		}
		return x
	}
	return v
}

// id names a chunk id by the version and ordinal of the document it is
// derived from (ids of other documents, or none, stay as they are).
func (n normalizer) id(id uuid.UUID) string {
	for v := int64(0); v <= 5; v++ {
		for o := range 8 {
			if keys.ChunkID(n.key, v, o) == id {
				return fmt.Sprintf("chunk(v%d,%d)", v, o)
			}
		}
	}
	return id.String()
}
