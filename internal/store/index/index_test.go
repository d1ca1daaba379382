package index

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

// openTest runs the adapter against the real Qdrant server, in a
// collection of the test's own that its clean-up deletes.
func openTest(t *testing.T, dim int) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(Config{Addr: testenv.QdrantAddr(t), Collection: fmt.Sprintf("test_%d", time.Now().UnixNano()), Dim: dim, UpsertBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.DeleteCollection(ctx, s.cfg.Collection)
		_ = s.Close()
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	s := openTest(t, storetest.Dim)
	storetest.Run(t, s, "idx-")
}

func TestMigrateChecksDimension(t *testing.T) {
	s := openTest(t, storetest.Dim)
	other, err := Open(Config{Addr: s.cfg.Addr, Collection: s.cfg.Collection, Dim: storetest.Dim + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	err = other.Migrate(context.Background())
	if project.KindOf(err) != project.Fatal {
		t.Fatalf("Migrate with another dimension: %v, want a fatal error", err)
	}
	if s.Migrate(context.Background()) != nil {
		t.Errorf("Migrate again with the same dimension failed, want it idempotent")
	}
}

func TestPayload(t *testing.T) {
	s := openTest(t, storetest.Dim)
	ctx := context.Background()
	doc := storetest.Doc("p", 4, "hello")
	doc.Chunks[0].Metadata = map[string]any{"lang": "de"}
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}}); err != nil {
		t.Fatal(err)
	}
	pts, err := s.client.Get(ctx, &qdrant.GetPoints{
		CollectionName: s.cfg.Collection, Ids: []*qdrant.PointId{qdrant.NewIDUUID(doc.Chunks[0].ID.String())},
		WithPayload: qdrant.NewWithPayload(true),
	})
	if err != nil || len(pts) != 1 {
		t.Fatalf("Get = %v, %v; want one point", pts, err)
	}
	p := pts[0].GetPayload()
	if p["document_key"].GetStringValue() != "p" || p["version"].GetIntegerValue() != 4 || p["ordinal"].GetIntegerValue() != 0 || p["text"].GetStringValue() != "hello" {
		t.Errorf("payload = %v, want document_key p, version 4, ordinal 0, text hello", p)
	}
	md := p["metadata"].GetStructValue().GetFields()
	if md["lang"].GetStringValue() != "de" || md["pages"].GetIntegerValue() != 1 {
		t.Errorf("metadata = %v, want the chunk's lang over the document's, and the document's pages", md)
	}
	info, err := s.client.GetCollectionInfo(ctx, s.cfg.Collection)
	if err != nil {
		t.Fatal(err)
	}
	schema := info.GetPayloadSchema()
	if schema["document_key"].GetDataType() != qdrant.PayloadSchemaType_Keyword || schema["version"].GetDataType() != qdrant.PayloadSchemaType_Integer {
		t.Errorf("payload schema = %v, want keyword document_key and integer version", schema)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want project.ErrorKind
	}{
		{status.Error(codes.Unavailable, "down"), project.Transient},
		{fmt.Errorf("upsert: %w", status.Error(codes.InvalidArgument, "Wrong input: Vector dimension error")), project.Rejected},
		{status.Error(codes.NotFound, "Not found: Collection"), project.Fatal},
		{status.Error(codes.Unauthenticated, "Invalid API key"), project.Fatal},
		{context.DeadlineExceeded, project.Transient},
		{errors.New("something"), project.Transient},
	}
	for _, tt := range tests {
		if got := project.KindOf(classify(context.Background(), tt.err)); got != tt.want {
			t.Errorf("kind of %v = %s, want %s", tt.err, got, tt.want)
		}
	}
}

func TestMigrateCreatesShards(t *testing.T) {
	ctx := context.Background()
	s, err := Open(Config{Addr: testenv.QdrantAddr(t), Collection: fmt.Sprintf("shards_%d", time.Now().UnixNano()), Dim: storetest.Dim, Shards: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.DeleteCollection(ctx, s.cfg.Collection)
		_ = s.Close()
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := s.client.GetCollectionInfo(ctx, s.cfg.Collection)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.GetConfig().GetParams().GetShardNumber(); got != 3 {
		t.Errorf("shard number = %d, want 3", got)
	}
}
