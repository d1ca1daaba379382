package graph

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/testenv"
)

// TestDeadIdleConnectionIsDropped: a pooled connection whose server
// stopped answering while it idled (a proxy that passes no byte and
// resets nothing) is checked before it is used and dropped, so a call
// without a deadline of its own fails within the acquisition timeout and
// the driver's retries. Before the liveness check, the call took the dead
// connection and waited on it for ever.
func TestDeadIdleConnectionIsDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a connection to idle past the liveness check")
	}
	u, err := url.Parse(testenv.Neo4jURI(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewStallProxy(t, u.Host)
	s, err := Open(Config{URI: "bolt://" + proxy.Addr(), User: os.Getenv("PROJECTOR_NEO4J_USER"), Password: os.Getenv("PROJECTOR_NEO4J_PASSWORD")})
	if err != nil {
		t.Fatal(err)
	}
	query := func() error {
		_, err := neo4j.ExecuteQuery(context.Background(), s.driver, "RETURN 1", nil, neo4j.EagerResultTransformer, s.queryConfig())
		return err
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	proxy.Strand()
	// The condition is time itself: the pooled connection has to idle
	// past the check.
	time.Sleep(livenessCheckAfter + time.Second)
	done := make(chan error, 1)
	go func() { done <- query() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a query through a server that passes no byte succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("a query waited a minute on a dead pooled connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.Close(ctx)
}
