package fence_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

func TestDiff(t *testing.T) {
	a, b, c := keys.ChunkID("d", 1, 0), keys.ChunkID("d", 1, 1), keys.ChunkID("d", 1, 2)
	tests := []struct {
		name                string
		want, got           []uuid.UUID
		missing, unexpected []uuid.UUID
	}{
		{"equal", []uuid.UUID{a, b}, []uuid.UUID{b, a}, nil, nil},
		{"one missing", []uuid.UUID{a, b}, []uuid.UUID{a}, []uuid.UUID{b}, nil},
		{"one unexpected", []uuid.UUID{a}, []uuid.UUID{a, c}, nil, []uuid.UUID{c}},
		{"same count, other id", []uuid.UUID{a, b}, []uuid.UUID{a, c}, []uuid.UUID{b}, []uuid.UUID{c}},
		{"duplicate is unexpected", []uuid.UUID{a}, []uuid.UUID{a, a}, nil, []uuid.UUID{a}},
		{"withdrawn, nothing held", nil, nil, nil, nil},
		{"withdrawn, still held", nil, []uuid.UUID{a}, nil, []uuid.UUID{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missing, unexpected := fence.Diff(tt.want, tt.got)
			if !slices.Equal(missing, tt.missing) || !slices.Equal(unexpected, tt.unexpected) {
				t.Errorf("Diff = missing %v, unexpected %v; want %v, %v", missing, unexpected, tt.missing, tt.unexpected)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want fence.Mode
		ok   bool
	}{{"ids", fence.IDs, true}, {"count", fence.Count, true}, {"off", fence.Off, true}, {"IDS", "", false}, {"", "", false}} {
		got, err := fence.ParseMode(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// storeUnderTest is an adapter with a way to write to it behind the
// projector's back, as a second writer would.
type storeUnderTest struct {
	fence.Store
	apply func(ctx context.Context, w *project.Write) error
	// replace removes the chunk id drop of the document and adds a foreign
	// chunk id add that names the same document_key.
	replace func(ctx context.Context, key string, drop, add uuid.UUID) error
}

// foreign is an id the projector never writes: not a UUIDv5 of any name.
var foreign = uuid.MustParse("00000000-0000-4000-8000-00000000f00d")

// TestIDsFenceCatchesWhatCountsMiss is the difference between the fences:
// one chunk of a document removed and a foreign one added directly in a
// store keeps the count, so the count fence passes and the ids fence
// reports 1 missing and 1 unexpected.
func TestIDsFenceCatchesWhatCountsMiss(t *testing.T) {
	stores := map[string]func(t *testing.T) (storeUnderTest, string){
		project.StoreIndex:      openIndex,
		project.StoreGraph:      openGraph,
		project.StoreRelational: openRelational,
	}
	for _, name := range []string{project.StoreIndex, project.StoreGraph, project.StoreRelational} {
		t.Run(name, func(t *testing.T) {
			s, prefix := stores[name](t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			doc := storetest.Doc(prefix+"doc", 2, "one", "two", "three")
			if err := s.apply(ctx, &project.Write{Live: []project.Document{doc}}); err != nil {
				t.Fatal(err)
			}
			want := map[string][]uuid.UUID{doc.Key: keys.ChunkIDs(doc.Key, 2, 3)}
			for _, mode := range []fence.Mode{fence.Count, fence.IDs} {
				got, err := fence.New(mode, prometheus.NewRegistry(), s).Check(ctx, want)
				if err != nil || len(got) != 0 {
					t.Fatalf("%s fence before the damage = %v, %v; want no mismatch", mode, got, err)
				}
			}
			dropped := doc.Chunks[1].ID
			if err := s.replace(ctx, doc.Key, dropped, foreign); err != nil {
				t.Fatal(err)
			}

			got, err := fence.New(fence.Count, prometheus.NewRegistry(), s).Check(ctx, want)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 0 {
				t.Errorf("count fence = %v, want no mismatch (the count is unchanged)", got)
			}

			got, err = fence.New(fence.IDs, prometheus.NewRegistry(), s).Check(ctx, want)
			if err != nil {
				t.Fatal(err)
			}
			wantMismatch := fence.Mismatch{Store: name, Key: doc.Key, Want: 3, Got: 3, Missing: []uuid.UUID{dropped}, Unexpected: []uuid.UUID{foreign}}
			if len(got) != 1 || fmt.Sprintf("%+v", got[0]) != fmt.Sprintf("%+v", wantMismatch) {
				t.Errorf("ids fence = %+v, want [%+v]", got, wantMismatch)
			}
		})
	}
}

func openIndex(t *testing.T) (storeUnderTest, string) {
	ctx := context.Background()
	s, err := index.Open(index.Config{Addr: testenv.QdrantAddr(t), Collection: fmt.Sprintf("fence_%d", time.Now().UnixNano()), Dim: storetest.Dim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client().DeleteCollection(context.Background(), s.Collection())
		_ = s.Close()
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return storeUnderTest{Store: s, apply: s.Apply, replace: func(ctx context.Context, key string, drop, add uuid.UUID) error {
		_, err := s.Client().Delete(ctx, &qdrant.DeletePoints{CollectionName: s.Collection(), Wait: qdrant.PtrOf(true),
			Points: qdrant.NewPointsSelector(qdrant.NewIDUUID(drop.String()))})
		if err != nil {
			return err
		}
		payload, err := qdrant.TryValueMap(map[string]any{"document_key": key, "version": int64(2), "ordinal": int64(1), "text": "not the projector's"})
		if err != nil {
			return err
		}
		_, err = s.Client().Upsert(ctx, &qdrant.UpsertPoints{CollectionName: s.Collection(), Wait: qdrant.PtrOf(true), Points: []*qdrant.PointStruct{
			{Id: qdrant.NewIDUUID(add.String()), Vectors: qdrant.NewVectorsDense(make([]float32, storetest.Dim)), Payload: payload},
		}})
		return err
	}}, "fence/"
}

func openGraph(t *testing.T) (storeUnderTest, string) {
	uri := testenv.Neo4jURI(t)
	ctx := context.Background()
	user, password := os.Getenv("PROJECTOR_NEO4J_USER"), os.Getenv("PROJECTOR_NEO4J_PASSWORD")
	s, err := graph.Open(graph.Config{URI: uri, User: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	driver, err := neo4j.NewDriverWithContext(uri, auth)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("fence-test-%d/", time.Now().UnixNano())
	run := func(ctx context.Context, cypher string, params map[string]any) error {
		_, err := neo4j.ExecuteQuery(ctx, driver, cypher, params, neo4j.EagerResultTransformer)
		return err
	}
	t.Cleanup(func() {
		_ = run(ctx, `MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p) DETACH DELETE n`, map[string]any{"p": prefix})
		_ = driver.Close(ctx)
		_ = s.Close(ctx)
	})
	return storeUnderTest{Store: s, apply: s.Apply, replace: func(ctx context.Context, key string, drop, add uuid.UUID) error {
		if err := run(ctx, `MATCH (c:Chunk {id: $id}) DETACH DELETE c`, map[string]any{"id": drop.String()}); err != nil {
			return err
		}
		return run(ctx, `MATCH (d:Document {key: $k}) CREATE (d)-[:HAS_CHUNK]->(:Chunk {id: $id, document_key: $k, version: 2, ordinal: 1})`,
			map[string]any{"k": key, "id": add.String()})
	}}, prefix
}

func openRelational(t *testing.T) (storeUnderTest, string) {
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	schema := fmt.Sprintf("fence_test_%d", time.Now().UnixNano())
	s, err := postgres.Open(ctx, dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		testenv.Missing(t, "PostgreSQL", err.Error())
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = s.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		s.Close()
	})
	apply := func(ctx context.Context, w *project.Write) error { return s.Apply(ctx, w, nil) }
	return storeUnderTest{Store: s, apply: apply, replace: func(ctx context.Context, key string, drop, add uuid.UUID) error {
		_, err := s.Pool().Exec(ctx, `UPDATE chunks SET chunk_id = $1 WHERE chunk_id = $2 AND document_key = $3`, add, drop, key)
		return err
	}}, ""
}
