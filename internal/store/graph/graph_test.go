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
	return openTestWith(t, CreateNewVersions, false)
}

// openTestWith opens a store that writes chunks as mode says, with or
// without their text.
func openTestWith(t testing.TB, mode ChunkWrites, text bool) (*Store, string) {
	t.Helper()
	uri := testenv.Neo4jURI(t)
	s, err := Open(Config{URI: uri, User: os.Getenv("PROJECTOR_NEO4J_USER"), Password: os.Getenv("PROJECTOR_NEO4J_PASSWORD"),
		Chunks: mode, ChunkText: text})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	prefix := fmt.Sprintf("graph-test-%d-", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = neo4j.ExecuteQuery(ctx, s.driver, `MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p)
	OR (n:PartitionWriter AND n.topic STARTS WITH $p) OR (n:WithdrawnDocument AND n.key STARTS WITH $p) DETACH DELETE n`,
			map[string]any{"p": prefix}, neo4j.EagerResultTransformer)
		_ = s.Close(ctx)
	})
	return s, prefix
}

func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		name string
		mode ChunkWrites
		text bool
	}{
		{"create new versions", CreateNewVersions, false},
		{"create new versions with text", CreateNewVersions, true},
		{"merge all", MergeAll, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, prefix := openTestWith(t, tt.mode, tt.text)
			storetest.Run(t, s, prefix, storetest.RefusesLate)
		})
	}
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

// TestClassify maps errors with the codes and messages Neo4j 5 sends,
// captured from the real server, to what the projector does.
func TestClassify(t *testing.T) {
	n4j := func(code, msg string) error { return &neo4j.Neo4jError{Code: code, Msg: msg} }
	memory := n4j("Neo.TransientError.General.MemoryPoolOutOfMemoryError",
		"The allocation of an extra 26.0 MiB would use more than the limit 716.8 MiB. Currently using 711.5 MiB. dbms.memory.transaction.total.max threshold reached")
	tests := []struct {
		name  string
		err   error
		want  project.ErrorKind
		limit string
	}{
		{"deadlock", n4j("Neo.TransientError.Transaction.DeadlockDetected", "ForsetiClient can't acquire ExclusiveLock"), project.Transient, ""},
		{"unauthorized", n4j("Neo.ClientError.Security.Unauthorized", "The client is unauthorized due to authentication failure."), project.Fatal, ""},
		{"no database", n4j("Neo.ClientError.Database.DatabaseNotFound", "Database does not exist. Database name: 'x'."), project.Fatal, ""},
		{"constraint", n4j("Neo.ClientError.Schema.ConstraintValidationFailed", "Node(1) already exists with label `Chunk` and property `id` = 'x'"), project.Rejected, ""},
		{"a value's type", n4j("Neo.ClientError.Statement.TypeError", "Property values can only be of primitive types or arrays thereof. Encountered: Map{a -> Long(1)}."), project.Rejected, ""},
		{"syntax", n4j("Neo.ClientError.Statement.SyntaxError", "Invalid input 'RETRN': expected 'FOREACH', 'ALTER'"), project.Fatal, ""},
		{"missing parameter", n4j("Neo.ClientError.Statement.ParameterMissing", "Expected parameter(s): missing"), project.Fatal, ""},
		{"memory limit", memory, project.Limit, "dbms.memory.transaction.total.max"},
		{"memory limit after the driver's retries", fmt.Errorf("write batch: %w", &neo4j.TransactionExecutionLimit{
			Cause: "timeout (exceeded max retry time: 30s)", Errors: []error{memory, memory, memory, memory, memory}}), project.Limit, "dbms.memory.transaction.total.max"},
		{"transaction timeout", n4j("Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration",
			"The transaction has been terminated. Retry your operation in a new transaction, and you should see a successful result. The transaction has not completed within the timeout specified at its start by the client."), project.Limit, "db.transaction.timeout"},
		{"unknown", n4j("Neo.DatabaseError.General.UnknownError", "x"), project.Transient, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(context.Background(), tt.err)
			if got := project.KindOf(err); got != tt.want {
				t.Errorf("kind = %s, want %s", got, tt.want)
			}
			if got := project.LimitOf(err); got != tt.limit {
				t.Errorf("limit = %q, want %q", got, tt.limit)
			}
		})
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

// TestFenceRefusesAnOlderWriter: once a write of a newer writer of a
// partition is in, the graph refuses, in its transaction, a write of an
// older one and keeps nothing of it; a writer of another partition is not
// concerned.
func TestFenceRefusesAnOlderWriter(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	topic := prefix + "documents"
	newer, old := project.Fence{Topic: topic, Token: 2}, project.Fence{Topic: topic, Token: 1}
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(prefix+"a", 2, "x")}, Fence: newer}); err != nil {
		t.Fatalf("Apply under token 2: %v", err)
	}
	late := &project.Write{Live: []project.Document{storetest.Doc(prefix+"b", 1, "x", "y")}, Withdrawn: []project.Withdrawal{{Key: prefix + "a", Version: 2}}, Fence: old}
	var fenced *project.FencedError
	if err := s.Apply(ctx, late); !errors.As(err, &fenced) || fenced.Newest != 2 || fenced.Store != project.StoreGraph {
		t.Fatalf("Apply under token 1 after token 2 = %v, want the graph's FencedError naming token 2", err)
	}
	ids, err := s.ChunkIDs(ctx, []string{prefix + "a", prefix + "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids[prefix+"a"]) != 1 || len(ids[prefix+"b"]) != 0 {
		t.Errorf("chunks after the refused write: a %d, b %d; want a's 1 kept and nothing of b", len(ids[prefix+"a"]), len(ids[prefix+"b"]))
	}
	elsewhere := project.Fence{Topic: topic, Partition: 1, Token: 1}
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(prefix+"c", 1, "x")}, Fence: elsewhere}); err != nil {
		t.Errorf("Apply under token 1 of another partition: %v", err)
	}
}

// TestTombstoneRefusesALateWrite: a withdrawal at a log position leaves a
// tombstone, no Document node and no chunk; a late live write of the
// withdrawn version (a repair that read the document before it was
// withdrawn, say) is refused and leaves nothing, not even an empty node;
// the withdrawal read again changes nothing; a higher version revives the
// document and retires the tombstone.
func TestTombstoneRefusesALateWrite(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	key := prefix + "t"
	at := func(offset int64) project.Position {
		return project.Position{Topic: prefix + "documents", Offset: offset}
	}
	live := storetest.Doc(key, 1, "x", "y")
	live.Position = at(1)
	withdrawal := project.Withdrawal{Key: key, Version: 1, Position: at(2)}
	for _, w := range []*project.Write{{Live: []project.Document{live}}, {Withdrawn: []project.Withdrawal{withdrawal}}} {
		if err := s.Apply(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	tombstone := func() (version int64, withdrawnAt time.Time, ok bool) {
		res, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (t:WithdrawnDocument {key: $k}) RETURN t.version AS v, t.withdrawn_at AS at`,
			map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Records) == 0 {
			return 0, time.Time{}, false
		}
		v, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "v")
		w, _, _ := neo4j.GetRecordValue[time.Time](res.Records[0], "at")
		return v, w, true
	}
	documents := func() int64 {
		res, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (d:Document {key: $k}) RETURN count(d) AS n`, map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n")
		return n
	}
	v, first, ok := tombstone()
	if !ok || v != 1 || documents() != 0 {
		t.Fatalf("after the withdrawal: tombstone %v at version %d, %d Document nodes; want a tombstone at 1 and none", ok, v, documents())
	}
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{live}}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.ChunkIDs(ctx, []string{key}); len(ids[key]) != 0 || documents() != 0 {
		t.Errorf("after a late write of the withdrawn version: %d chunks and %d Document nodes, want none", len(ids[key]), documents())
	}
	if err := s.Apply(ctx, &project.Write{Withdrawn: []project.Withdrawal{withdrawal}}); err != nil {
		t.Fatal(err)
	}
	if _, again, _ := tombstone(); !again.Equal(first) {
		t.Errorf("the withdrawal read again moved its tombstone from %s to %s", first, again)
	}
	revival := storetest.Doc(key, 2, "z")
	revival.Position = at(3)
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{revival}}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.ChunkIDs(ctx, []string{key}); len(ids[key]) != 1 || documents() != 1 {
		t.Errorf("after the revival: %d chunks and %d Document nodes, want 1 and 1", len(ids[key]), documents())
	}
	if _, _, ok := tombstone(); ok {
		t.Error("the revival kept the tombstone")
	}
}

// TestPruneTombstones removes the tombstones withdrawn before the cutoff
// and keeps the others.
func TestPruneTombstones(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	var withdrawn []project.Withdrawal
	for i := range 3 {
		withdrawn = append(withdrawn, project.Withdrawal{Key: fmt.Sprintf("%sp%d", prefix, i), Version: 1,
			Position: project.Position{Topic: prefix + "documents", Offset: int64(i)}})
	}
	if err := s.Apply(ctx, &project.Write{Withdrawn: withdrawn}); err != nil {
		t.Fatal(err)
	}
	// Two of them are made old: withdrawn a year ago.
	if _, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (t:WithdrawnDocument) WHERE t.key IN $k SET t.withdrawn_at = datetime() - duration('P365D')`,
		map[string]any{"k": []string{withdrawn[0].Key, withdrawn[1].Key}}, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
	removed, err := s.PruneTombstones(ctx, time.Now().Add(-24*time.Hour), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (t:WithdrawnDocument) WHERE t.key STARTS WITH $p RETURN collect(t.key) AS k`,
		map[string]any{"p": prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	left, _, _ := neo4j.GetRecordValue[[]any](res.Records[0], "k")
	if removed < 2 || len(left) != 1 || left[0] != withdrawn[2].Key {
		t.Errorf("PruneTombstones removed %d, left %v; want the two old ones removed and %s left", removed, left, withdrawn[2].Key)
	}
}
