package graph

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
	"github.com/projector/projector/internal/testenv"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	uri := testenv.Neo4jURI(t)
	s, err := Open(Config{URI: uri, User: os.Getenv("PROJECTOR_NEO4J_USER"), Password: os.Getenv("PROJECTOR_NEO4J_PASSWORD")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	prefix := fmt.Sprintf("graph-test-%d-", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = neo4j.ExecuteQuery(ctx, s.driver, `MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p) DETACH DELETE n`,
			map[string]any{"p": prefix}, neo4j.EagerResultTransformer)
		_ = s.Close(ctx)
	})
	return s, prefix
}

func TestConformance(t *testing.T) {
	s, prefix := openTest(t)
	storetest.Run(t, s, prefix)
}

func TestLayout(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	doc := storetest.Doc(prefix+"d", 2, "x", "y")
	for i := 0; i < 2; i++ {
		if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
MATCH (d:Document {key: $k})-[r:HAS_CHUNK]->(c:Chunk)
RETURN d.version AS v, d.title AS title, count(r) AS rels, count(DISTINCT c) AS chunks, collect(c.ordinal) AS ordinals`,
		map[string]any{"k": doc.Key}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 {
		t.Fatalf("rows = %d, want 1", len(res.Records))
	}
	r := res.Records[0].AsMap()
	if r["v"] != int64(2) || r["title"] != doc.Title || r["rels"] != int64(2) || r["chunks"] != int64(2) {
		t.Errorf("graph = %v, want version 2, title %q, 2 relationships to 2 chunks (MERGE twice must not duplicate)", r, doc.Title)
	}
	// The unique constraints exist.
	res, err = neo4j.ExecuteQuery(ctx, s.driver, `SHOW CONSTRAINTS YIELD labelsOrTypes, properties, type WHERE type = 'UNIQUENESS' RETURN labelsOrTypes[0] + '.' + properties[0] AS c`, nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	found := map[any]bool{}
	for _, r := range res.Records {
		c, _ := r.Get("c")
		found[c] = true
	}
	if !found["Document.key"] || !found["Chunk.id"] {
		t.Errorf("unique constraints = %v, want Document.key and Chunk.id", found)
	}
}

func TestIDsNeedTheRelationship(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	doc := storetest.Doc(prefix+"d", 1, "x", "y")
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}}); err != nil {
		t.Fatal(err)
	}
	_, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (:Document {key: $k})-[r:HAS_CHUNK]->(c:Chunk {id: $id}) DELETE r`,
		map[string]any{"k": doc.Key, "id": doc.Chunks[0].ID.String()}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.ChunkIDs(ctx, []string{doc.Key})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids[doc.Key]) != 1 || ids[doc.Key][0] != doc.Chunks[1].ID {
		t.Errorf("ids = %v, want only %s (the chunk still linked)", ids[doc.Key], doc.Chunks[1].ID)
	}
}

func TestKindOfCode(t *testing.T) {
	tests := map[string]project.ErrorKind{
		"Neo.TransientError.Transaction.DeadlockDetected":   project.Transient,
		"Neo.ClientError.Security.Unauthorized":             project.Fatal,
		"Neo.ClientError.Database.DatabaseNotFound":         project.Fatal,
		"Neo.ClientError.Schema.ConstraintValidationFailed": project.Rejected,
		"Neo.ClientError.Statement.TypeError":               project.Rejected,
		"Neo.ClientError.Statement.SyntaxError":             project.Fatal,
		"Neo.DatabaseError.General.UnknownError":            project.Transient,
	}
	for code, want := range tests {
		if got := kindOfCode(code); got != want {
			t.Errorf("kindOfCode(%s) = %s, want %s", code, got, want)
		}
	}
}

func TestRedactURI(t *testing.T) {
	if got := redactURI("neo4j+s://user:secret@host:7687"); got != "neo4j+s://***@host:7687" {
		t.Errorf("redactURI = %q, want the user information hidden", got)
	}
	if got := redactURI("bolt://host:7687"); got != "bolt://host:7687" {
		t.Errorf("redactURI = %q, want it unchanged", got)
	}
}

// TestCancelledWhileRetrying cancels a call while the driver's own retry
// loop sleeps between connection attempts. The driver reports that as a
// TransactionExecutionLimit that does not wrap context.Canceled; the store
// must, so a SIGTERM while Neo4j is down ends the service with status 0.
func TestCancelledWhileRetrying(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there: every connection is refused
	s, err := Open(Config{URI: "bolt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	err = s.Migrate(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Migrate cancelled while the driver retries: %v, want an error that is context.Canceled", err)
	}
}
