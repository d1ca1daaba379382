package index

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

// openTest runs the adapter against the real Qdrant server, in a
// collection of the test's own that its clean-up deletes.
func openTest(t *testing.T, dim int) *Store {
	t.Helper()
	return openWith(t, Config{Dim: dim, UpsertBatch: 2})
}

// openWith is openTest with the rest of cfg as given.
func openWith(t testing.TB, cfg Config) *Store {
	t.Helper()
	ctx := context.Background()
	cfg.Addr, cfg.Collection = testenv.QdrantAddr(t), fmt.Sprintf("test_%d", time.Now().UnixNano())
	s, err := Open(cfg)
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
	storetest.Run(t, s, "idx-", storetest.KeepsLate)
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

// TestUpsertBoundedInBytes writes documents whose points are large (the
// title is copied into every payload) and checks every upsert request the
// server receives against UpsertMaxBytes, and that a point over it alone is
// its record's fault.
func TestUpsertBoundedInBytes(t *testing.T) {
	const maxBytes = 64 << 10
	s := openTest(t, storetest.Dim)
	var sizes []int
	var mu sync.Mutex
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if u, ok := req.(*qdrant.UpsertPoints); ok {
			mu.Lock()
			sizes = append(sizes, proto.Size(u))
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	host, port, _ := net.SplitHostPort(s.cfg.Addr)
	portN, _ := strconv.Atoi(port)
	client, err := qdrant.NewClient(&qdrant.Config{Host: host, Port: portN, SkipCompatibilityCheck: true,
		GrpcOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cfg := s.cfg
	cfg.UpsertBatch, cfg.UpsertMaxBytes = 1000, maxBytes
	bounded := &Store{client: client, cfg: cfg}

	// A long topic name makes each document's condition on the points it
	// may replace (the upsert's update_filter) as large as its point.
	topic := strings.Repeat("t", 249)
	tests := []struct {
		name      string
		title     int // bytes of the title, copied into every point
		docs      int // documents of one chunk each, at a position, besides the one of chunks
		chunks    int
		wantCalls int // 0: any number
		rejected  bool
	}{
		{"small points, one call", 10, 0, 20, 1, false},
		{"large points, split", 10 << 10, 0, 20, 4, false},
		{"a point over the bound", 70 << 10, 0, 1, 0, true},
		{"many documents, their conditions counted", 10, 300, 1, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sizes = nil
			texts := make([]string, tt.chunks)
			for i := range texts {
				texts[i] = "chunk " + strconv.Itoa(i)
			}
			doc := storetest.Doc("b-"+strconv.Itoa(tt.title), 1, texts...)
			doc.Title = strings.Repeat("t", tt.title)
			w := &project.Write{Live: []project.Document{doc}}
			for i := range tt.docs {
				d := storetest.Doc("many-"+strconv.Itoa(i), 1, "one chunk")
				d.Position = project.Position{Topic: topic, TopicID: project.TopicID{1}, Partition: 0, Offset: int64(i)}
				w.Live = append(w.Live, d)
			}
			err := bounded.Apply(context.Background(), w)
			if got := project.KindOf(err) == project.Rejected && err != nil; got != tt.rejected {
				t.Fatalf("Apply = %v, rejected %v, want rejected %v", err, got, tt.rejected)
			}
			if tt.wantCalls > 0 && len(sizes) != tt.wantCalls || tt.rejected && len(sizes) != 0 {
				t.Errorf("upsert calls = %d (%v bytes), want %d", len(sizes), sizes, tt.wantCalls)
			}
			for _, n := range sizes {
				if n > maxBytes {
					t.Errorf("an upsert request has %d bytes, want at most %d", n, maxBytes)
				}
			}
		})
	}
}

func TestMigrateCreatesShards(t *testing.T) {
	s := openWith(t, Config{Dim: storetest.Dim, Shards: 3})
	info, err := s.client.GetCollectionInfo(context.Background(), s.cfg.Collection)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.GetConfig().GetParams().GetShardNumber(); got != 3 {
		t.Errorf("shard number = %d, want 3", got)
	}
}
