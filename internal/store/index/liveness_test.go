package index

import (
	"context"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// TestHalfOpenConnectionFails: a call on a connection whose server stopped
// answering (a proxy that passes no byte and resets nothing, which TCP
// keepalives do not notice) fails once gRPC's keepalive ping goes
// unanswered, though its context has no deadline.
func TestHalfOpenConnectionFails(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the keepalive ping to go unanswered")
	}
	proxy := testenv.NewStallProxy(t, testenv.QdrantAddr(t))
	s, err := Open(Config{Addr: proxy.Addr(), Collection: "unused", Dim: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.Strand()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.Ping(context.Background()) }()
	bound := (keepAliveTime+keepAliveTimeout)*time.Second + 5*time.Second
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call through a server that passes no byte succeeded")
		}
		t.Logf("failed after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	case <-time.After(bound):
		t.Fatalf("a call waited %s on a half-open connection", bound)
	}
}
