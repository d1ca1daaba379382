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
	"github.com/projector/projector/internal/qdrantdouble"
	"github.com/projector/projector/internal/store/storetest"
)

// openTest runs the adapter against an in-process Qdrant double: the
// adapter's behaviour, not the server's, is under test here.
func openTest(t *testing.T, dim int) *Store {
	t.Helper()
	ctx := context.Background()
	running, err := qdrantdouble.New(qdrantdouble.Options{}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = running.Close() })
	s, err := Open(Config{Addr: running.Addr(), Collection: fmt.Sprintf("test_%d", time.Now().UnixNano()), Dim: dim, UpsertBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
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

// TestClassify maps errors as Qdrant 1.17.1 sends them, captured from the
// real server through the go-client (which prefixes the call and the
// collection), to what the projector does.
func TestClassify(t *testing.T) {
	const prefix = "Upsert() failed: chunks: rpc error: code = "
	tests := []struct {
		err   error
		want  project.ErrorKind
		limit string
	}{
		{status.Error(codes.Unavailable, "down"), project.Transient, ""},
		{fmt.Errorf("upsert: %w", status.Error(codes.InvalidArgument, prefix+"InvalidArgument desc = Wrong input: Vector dimension error: expected dim: 4, got 3")), project.Rejected, ""},
		{status.Error(codes.InvalidArgument, prefix+`InvalidArgument desc = Bad request: Limit exceeded 3 > 2 for "upsert limit". Help: Reduce the "upsert limit" parameter to or below 2.`), project.Limit, "upsert_max_batchsize"},
		{status.Error(codes.InvalidArgument, "Delete() failed: chunks: rpc error: code = InvalidArgument desc = Bad request: Condition size limit reached (3 > 1). Help: Reduce the size of your condition."), project.Limit, "condition_max_size"},
		{status.Error(codes.InvalidArgument, "Delete() failed: chunks: rpc error: code = InvalidArgument desc = Bad request: Filter condition limit reached (2 > 1). Help: Reduce the amount of conditions of your filter."), project.Limit, "filter_max_conditions"},
		{status.Error(codes.ResourceExhausted, prefix+"ResourceExhausted desc = Rate limiting exceeded: Write rate limit exceeded, request larger than rate limiter capacity, please try to split your request"), project.Limit, "write_rate_limit"},
		{status.Error(codes.Unknown, "Delete() failed: chunks: ResourceExhausted: Rate limiting exceeded: Write rate limit exceeded: Operation requires 1 tokens but only 0.0 were available. Retry after 60s, retry after 60 seconds"), project.Limit, "write_rate_limit"},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (40000000 vs. 33554432)"), project.Limit, "max_request_size"},
		{status.Error(codes.InvalidArgument, "Bad request: something new"), project.Limit, "qdrant_limit"},
		{status.Error(codes.NotFound, prefix+"NotFound desc = Not found: Collection `chunks` doesn't exist!"), project.Fatal, ""},
		{status.Error(codes.Unauthenticated, "Invalid API key"), project.Fatal, ""},
		{context.DeadlineExceeded, project.Transient, ""},
		{errors.New("something"), project.Transient, ""},
	}
	for _, tt := range tests {
		err := classify(context.Background(), tt.err)
		if got := project.KindOf(err); got != tt.want {
			t.Errorf("kind of %v = %s, want %s", tt.err, got, tt.want)
		}
		if got := project.LimitOf(err); got != tt.limit {
			t.Errorf("limit of %v = %q, want %q", tt.err, got, tt.limit)
		}
	}
}
