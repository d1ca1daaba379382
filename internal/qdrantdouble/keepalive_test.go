package qdrantdouble

import (
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/connectivity"
)

// TestKeepalivePings keeps an idle go-client connected past three of its
// keepalive pings (one every 10 s, the go-client's default). Qdrant answers
// them; a gRPC server with Go's default policy instead sends GOAWAY
// "too_many_pings" after three, and every idle client reconnects.
func TestKeepalivePings(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 35 s for the client's keepalive pings")
	}
	t.Parallel()
	running, err := New(Options{}).Start(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	client, err := qdrant.NewClient(&qdrant.Config{Host: "127.0.0.1", Port: running.Port(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.HealthCheck(t.Context()); err != nil {
		t.Fatal(err)
	}
	conn := client.GetGrpcClient().Conn()
	time.Sleep(35 * time.Second)
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("connection state after 35 s idle: %v, want READY (the double closed the connection for its pings)", s)
	}
}
