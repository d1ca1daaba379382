package qdrantdouble

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every test drives the double through the real go-client, as the service
// does, and stops both: goleak fails the run if a goroutine of either leaks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startDouble starts a double on a free port and connects a go-client to it
// (the client runs its HealthCheck on connect). Both are closed when the test
// ends, the client first.
func startDouble(t *testing.T, opts Options, clientKey string) *qdrant.Client {
	t.Helper()
	running, err := New(opts).Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatalf("start double: %v", err)
	}
	t.Cleanup(func() {
		if err := running.Close(); err != nil {
			t.Errorf("close double: %v", err)
		}
	})
	client, err := qdrant.NewClient(&qdrant.Config{Host: "127.0.0.1", Port: running.Port(), APIKey: clientKey})
	if err != nil {
		t.Fatalf("connect client: %v", err)
	}
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	return client
}

// newCollection creates a collection of dim-sized vectors.
func newCollection(t *testing.T, client *qdrant.Client, name string, dim uint64, d qdrant.Distance) {
	t.Helper()
	err := client.CreateCollection(t.Context(), &qdrant.CreateCollection{
		CollectionName: name,
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: dim, Distance: d}),
	})
	if err != nil {
		t.Fatalf("create collection %s: %v", name, err)
	}
}

// upsert writes points and waits for them.
func upsert(t *testing.T, client *qdrant.Client, collection string, points ...*qdrant.PointStruct) {
	t.Helper()
	_, err := client.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: collection, Wait: qdrant.PtrOf(true), Points: points})
	if err != nil {
		t.Fatalf("upsert: %v", err)
	}
}

// pt builds a point with a 2-d vector.
func pt(id *qdrant.PointId, payload map[string]any) *qdrant.PointStruct {
	return &qdrant.PointStruct{Id: id, Vectors: qdrant.NewVectors(0.6, 0.8), Payload: qdrant.NewValueMap(payload)}
}

// idString prints a point id for comparisons and messages.
func idString(id *qdrant.PointId) string {
	if u := id.GetUuid(); u != "" {
		return u
	}
	return strconv.FormatUint(id.GetNum(), 10)
}

// idStrings prints the ids of points.
func idStrings(points []*qdrant.RetrievedPoint) []string {
	out := make([]string, len(points))
	for i, p := range points {
		out[i] = idString(p.GetId())
	}
	return out
}

// scrollAll pages through a collection and returns every id in page order.
func scrollAll(t *testing.T, client *qdrant.Client, collection string, filter *qdrant.Filter) []string {
	t.Helper()
	var ids []string
	var offset *qdrant.PointId
	for {
		page, next, err := client.ScrollAndOffset(t.Context(), &qdrant.ScrollPoints{
			CollectionName: collection, Filter: filter, Offset: offset, Limit: qdrant.PtrOf(uint32(100)),
		})
		if err != nil {
			t.Fatalf("scroll: %v", err)
		}
		ids = append(ids, idStrings(page)...)
		if next == nil {
			return ids
		}
		offset = next
	}
}

// grpcStatus returns the gRPC status inside an error the go-client wrapped.
func grpcStatus(t *testing.T, err error) *status.Status {
	t.Helper()
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		t.Fatalf("got error %v, want a gRPC status", err)
	}
	return se.GRPCStatus()
}

// wantStatus fails unless err carries code and, when msg is not empty, message msg.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st := grpcStatus(t, err)
	if st.Code() != code || (msg != "" && st.Message() != msg) {
		t.Fatalf("got %s %q, want %s %q", st.Code(), st.Message(), code, msg)
	}
}

// sameIDs compares id lists ignoring order.
func sameIDs(got, want []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}
