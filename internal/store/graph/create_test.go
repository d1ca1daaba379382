package graph

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/store/storetest"
)

// dump returns every node and relationship of the documents of prefix,
// with the prefix taken out of keys and chunk ids replaced by their
// key:version:ordinal name when they are the contract's, so that the
// graphs of two prefixes can be compared. A duplicate relationship or node
// shows as a line twice.
func dump(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
CALL {
	MATCH (n:Document) WHERE n.key STARTS WITH $p RETURN n
	UNION
	MATCH (n:Chunk) WHERE n.document_key STARTS WITH $p RETURN n
}
RETURN labels(n)[0] AS label, properties(n) AS props,
	[(n)-[r]->(m) | type(r) + '->' + coalesce(m.id, m.key)] AS out`,
		map[string]any{"p": prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	name := func(props map[string]any) string {
		id, _ := props["id"].(string)
		key, _ := props["document_key"].(string)
		version, _ := props["version"].(int64)
		ordinal, _ := props["ordinal"].(int64)
		if id == keys.ChunkID(key, version, int(ordinal)).String() {
			return fmt.Sprintf("chunk(%s:%d:%d)", key, version, ordinal)
		}
		return id
	}
	ids := map[string]string{}
	for _, r := range res.Records {
		props, _, _ := neo4j.GetRecordValue[map[string]any](r, "props")
		if id, ok := props["id"].(string); ok {
			ids[id] = name(props)
		}
	}
	var out []string
	for _, r := range res.Records {
		label, _, _ := neo4j.GetRecordValue[string](r, "label")
		props, _, _ := neo4j.GetRecordValue[map[string]any](r, "props")
		rels, _, _ := neo4j.GetRecordValue[[]any](r, "out")
		if id, ok := props["id"].(string); ok {
			props["id"] = ids[id]
		}
		var to []string
		for _, rel := range rels {
			r, _ := rel.(string)
			if n, ok := ids[strings.TrimPrefix(r, "HAS_CHUNK->")]; ok {
				r = "HAS_CHUNK->" + n
			}
			to = append(to, r)
		}
		slices.Sort(to)
		line := fmt.Sprintf("%s %v %s", label, props, strings.Join(to, " "))
		out = append(out, strings.ReplaceAll(line, prefix, ""))
	}
	slices.Sort(out)
	return out
}

// exec runs a statement of a test against the graph, as a person with a
// Cypher shell would.
func exec(t *testing.T, s *Store, query string, params map[string]any) {
	t.Helper()
	if _, err := neo4j.ExecuteQuery(context.Background(), s.driver, query, params, neo4j.EagerResultTransformer); err != nil {
		t.Fatal(err)
	}
}

// TestCreateLeavesTheGraphAsMergeDoes writes the same sequence of writes
// with CreateNewVersions and with MergeAll, each under its own prefix, and
// requires the two graphs to be equal after every step: repeats, late
// writes, withdrawals, revivals, a reconcile deletion, and graphs changed
// behind the projector's back so that a CREATE meets an existing chunk
// (which must then be merged, not reported).
func TestCreateLeavesTheGraphAsMergeDoes(t *testing.T) {
	ctx := context.Background()
	create, cp := openTestWith(t, CreateNewVersions, true)
	merge, mp := openTestWith(t, MergeAll, true)
	live := func(docs ...project.Document) func(string) *project.Write {
		return func(p string) *project.Write {
			w := &project.Write{}
			for _, d := range docs {
				w.Live = append(w.Live, storetest.Doc(p+d.Key, d.Version, texts(d)...))
			}
			return w
		}
	}
	withdraw := func(key string, version int64) func(string) *project.Write {
		return func(p string) *project.Write {
			return &project.Write{Withdrawn: []project.Withdrawal{{Key: p + key, Version: version}}}
		}
	}
	doc := func(key string, version int64, n int) project.Document {
		d := project.Document{Key: key, Version: version}
		for i := range n {
			d.Chunks = append(d.Chunks, project.Chunk{Text: fmt.Sprintf("text %d of %s v%d", i, key, version)})
		}
		return d
	}
	steps := []struct {
		name   string
		tamper string // a statement run on the graph before the write, $p the prefix
		write  func(string) *project.Write
	}{
		{name: "first versions", write: live(doc("a", 1, 3), doc("b", 1, 2), doc("c", 2, 1))},
		{name: "redelivery", write: live(doc("a", 1, 3), doc("b", 1, 2))},
		{name: "new version beside a redelivery", write: live(doc("a", 2, 2), doc("b", 1, 2))},
		{name: "late write of an older version", write: live(doc("a", 1, 3))},
		{name: "new version shrinks", write: live(doc("a", 3, 1))},
		{name: "the shrunk version again", write: live(doc("a", 3, 1))},
		{name: "withdrawal", write: withdraw("b", 1)},
		{name: "revival of the withdrawn version", write: live(doc("b", 1, 2))},
		{name: "withdrawal again", write: withdraw("b", 1)},
		{name: "re-created at a higher version after the tombstone", write: live(doc("b", 4, 3))},
		{name: "deleted by reconcile, then written again", write: func(p string) *project.Write { return reconcile.Withdrawals([]string{p + "c"}) }},
		{name: "after reconcile's deletion", write: live(doc("c", 2, 1))},
		{name: "no chunks", write: live(doc("d", 1, 0))},
		{
			name:   "a Document node deleted by hand, its chunks left detached",
			tamper: `MATCH (d:Document {key: $p + 'a'}) DETACH DELETE d`,
			write:  live(doc("a", 3, 1), doc("e", 1, 2)),
		},
		{
			name:   "a Document node set back by hand below its chunks' version",
			tamper: `MATCH (d:Document {key: $p + 'b'}) SET d.version = 3`,
			write:  live(doc("b", 4, 3), doc("f", 1, 1)),
		},
		{name: "the repaired documents again", write: live(doc("a", 3, 1), doc("b", 4, 3))},
	}
	for _, st := range steps {
		for _, x := range []struct {
			s *Store
			p string
		}{{create, cp}, {merge, mp}} {
			if st.tamper != "" {
				exec(t, x.s, st.tamper, map[string]any{"p": x.p})
			}
			if err := x.s.Apply(ctx, st.write(x.p)); err != nil {
				t.Fatalf("%s: Apply (%v): %v, want the write to succeed as a MERGE does", st.name, x.s.chunks, err)
			}
		}
		// Only a graph changed by hand makes a CREATE meet a chunk.
		if n := create.fallbacks.Swap(0); (n > 0) != (st.tamper != "") {
			t.Errorf("%s: %d transactions written again with MERGE, want them only after the graph was changed by hand", st.name, n)
		}
		got, want := dump(t, create, cp), dump(t, merge, mp)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: graph written with CREATE for new versions =\n%s\nwant the graph of MERGE =\n%s",
				st.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func texts(d project.Document) []string {
	out := make([]string, len(d.Chunks))
	for i, c := range d.Chunks {
		out[i] = c.Text
	}
	return out
}

// TestConcurrentWritersOfOneDocument writes the same new version from two
// writers at once, as the old and the new owner of a partition may during
// a handover: each may read the Document node before the other commits and
// try to CREATE chunks the other created. Both writes must succeed and
// leave each chunk once.
func TestConcurrentWritersOfOneDocument(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("%sd%d", prefix, round)
		if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(key, 1, "x")}}); err != nil {
			t.Fatal(err)
		}
		w := &project.Write{Live: []project.Document{storetest.Doc(key, 2, "a", "b", "c", "d")}}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Apply(ctx, w) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, writer %d: Apply: %v, want both writers to succeed", round, i, err)
			}
		}
		res, err := neo4j.ExecuteQuery(ctx, s.driver, `
MATCH (c:Chunk {document_key: $k}) OPTIONAL MATCH (:Document {key: $k})-[r:HAS_CHUNK]->(c)
RETURN count(DISTINCT c) AS chunks, count(r) AS rels, collect(DISTINCT c.version) AS versions`,
			map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Records[0].AsMap()
		if got["chunks"] != int64(4) || got["rels"] != int64(4) || !slices.Equal(got["versions"].([]any), []any{int64(2)}) {
			t.Fatalf("round %d: graph = %v, want 4 chunks of version 2, each linked once", round, got)
		}
	}
}

// TestChunkText keeps the text on chunk nodes only when asked, and a
// rewrite without it removes the text it had: what a store holds follows
// the setting of the last write, while the reconciler's view of it does
// not depend on the setting at all.
func TestChunkText(t *testing.T) {
	with, prefix := openTestWith(t, CreateNewVersions, true)
	without, _ := openTestWith(t, CreateNewVersions, false)
	merging, _ := openTestWith(t, MergeAll, false)
	ctx := context.Background()
	key := prefix + "d"
	texts := func() []any {
		res, err := neo4j.ExecuteQuery(ctx, with.driver, `MATCH (c:Chunk {document_key: $k}) RETURN c.text AS text ORDER BY c.ordinal`,
			map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		var out []any
		for _, r := range res.Records {
			v, _ := r.Get("text")
			out = append(out, v)
		}
		return out
	}
	holdings := func() reconcile.Holding {
		h, err := with.Holdings(ctx, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		return h[key]
	}
	steps := []struct {
		name  string
		s     *Store
		doc   project.Document
		texts []any
	}{
		{"created with text", with, storetest.Doc(key, 1, "x", "y"), []any{"x", "y"}},
		{"a new version without text", without, storetest.Doc(key, 2, "x", "y"), []any{nil, nil}},
		{"the version again with text", with, storetest.Doc(key, 2, "x", "y"), []any{"x", "y"}},
		{"the version again without text (merged)", merging, storetest.Doc(key, 2, "x", "y"), []any{nil, nil}},
	}
	var first reconcile.Holding
	for i, st := range steps {
		if err := st.s.Apply(ctx, &project.Write{Live: []project.Document{st.doc}}); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := texts(); !slices.Equal(got, st.texts) {
			t.Errorf("%s: chunk texts = %v, want %v", st.name, got, st.texts)
		}
		h := holdings()
		if i == 1 {
			first = h
		}
		if i > 1 && fmt.Sprint(h) != fmt.Sprint(first) {
			t.Errorf("%s: holdings = %v, want %v whatever the text", st.name, h, first)
		}
	}
}

// TestChunkProperties writes each chunk's id, version, ordinal and
// metadata, whichever chunks of a document have metadata, and a rewrite
// of a chunk without metadata removes what it had, for both statements.
func TestChunkProperties(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode ChunkWrites
	}{{"create new versions", CreateNewVersions}, {"merge all", MergeAll}} {
		t.Run(tc.name, func(t *testing.T) {
			s, prefix := openTestWith(t, tc.mode, false)
			ctx := context.Background()
			key := prefix + "d"
			read := func() []string {
				res, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (:Document {key: $k})-[:HAS_CHUNK]->(c:Chunk)
RETURN c.id AS id, c.version AS version, c.ordinal AS ordinal, c.metadata AS metadata ORDER BY c.ordinal`,
					map[string]any{"k": key}, neo4j.EagerResultTransformer)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, r := range res.Records {
					out = append(out, fmt.Sprint(r.Values))
				}
				return out
			}
			want := func(d project.Document, metadata ...any) []string {
				var out []string
				for i, c := range d.Chunks {
					out = append(out, fmt.Sprint([]any{c.ID.String(), d.Version, int64(c.Ordinal), metadata[i]}))
				}
				return out
			}
			doc := storetest.Doc(key, 1, "x", "y", "z")
			doc.Chunks[1].Metadata = nil
			if err := s.Apply(ctx, &project.Write{Live: []project.Document{doc}}); err != nil {
				t.Fatal(err)
			}
			if got, w := read(), want(doc, `{"position":0}`, nil, `{"position":2}`); !slices.Equal(got, w) {
				t.Errorf("chunks = %v, want %v", got, w)
			}
			again := storetest.Doc(key, 1, "x", "y", "z")
			for i := range again.Chunks {
				again.Chunks[i].Metadata = nil
			}
			if err := s.Apply(ctx, &project.Write{Live: []project.Document{again}}); err != nil {
				t.Fatal(err)
			}
			if got, w := read(), want(again, nil, nil, nil); !slices.Equal(got, w) {
				t.Errorf("rewritten without metadata: chunks = %v, want %v", got, w)
			}
		})
	}
}

// TestLateWriteWaitsForTheNewerVersion: a late write of version 2 (a
// member that lost its partition) runs while the new owner's transaction
// writing version 3 holds the document's node. The late write must read
// the node's version only once it has the node, so it sees 3 and leaves
// it. Before, it read 1 before waiting for the lock and then set the node
// back to 2, or deleted it for a withdrawal of 2: a lost update under
// Neo4j's read-committed isolation.
func TestLateWriteWaitsForTheNewerVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(key string) *project.Write
	}{
		{"version", func(key string) *project.Write {
			return &project.Write{Live: []project.Document{storetest.Doc(key, 2, "y")}}
		}},
		{"withdrawal", func(key string) *project.Write {
			return &project.Write{Withdrawn: []project.Withdrawal{{Key: key, Version: 2}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { lateWriteWhileHeld(t, tc.late) })
	}
}

func lateWriteWhileHeld(t *testing.T, lateWrite func(key string) *project.Write) {
	s, prefix := openTest(t)
	ctx := context.Background()
	key := prefix + "d"
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(key, 1, "x")}}); err != nil {
		t.Fatal(err)
	}
	owner := s.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite})
	defer owner.Close(ctx)
	tx, err := owner.BeginTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	b, err := s.batchOf(&project.Write{Live: []project.Document{storetest.Doc(key, 3, "z")}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.Run(ctx, mergeDocuments, map[string]any{"docs": b.docs})
	if err == nil {
		_, err = res.Consume(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	late := make(chan error, 1)
	go func() { late <- s.Apply(ctx, lateWrite(key)) }()
	// The late write waits on the owner's lock once Neo4j lists a
	// transaction blocked on this test's document.
	deadline := time.Now().Add(30 * time.Second)
	for blocked := false; !blocked; {
		if time.Now().After(deadline) {
			t.Fatal("never saw the late write wait on the owner's transaction")
		}
		res, err := neo4j.ExecuteQuery(ctx, s.driver, `SHOW TRANSACTIONS YIELD status, parameters
WHERE status STARTS WITH 'Blocked' AND any(d IN parameters.docs WHERE d.key = $k) RETURN count(*) AS n`,
			map[string]any{"k": key}, neo4j.EagerResultTransformer)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := res.Records[0].Get("n")
		blocked = n.(int64) > 0
		select {
		case err := <-late:
			t.Fatalf("the late write returned (%v) while the owner's transaction held the document", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-late; err != nil {
		t.Fatalf("late Apply: %v", err)
	}
	got, err := neo4j.ExecuteQuery(ctx, s.driver, `MATCH (d:Document {key: $k}) RETURN d.version AS v`,
		map[string]any{"k": key}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 1 {
		t.Fatalf("%d document nodes after the late write, want the owner's one", len(got.Records))
	}
	if v, _ := got.Records[0].Get("v"); v != int64(3) {
		t.Errorf("document version = %v after the late write of 2, want the owner's 3", v)
	}
}
