package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/dlq"
)

// hostile is a document whose every string tries to escape into a
// statement, a template or a log line.
type hostile struct {
	Key      string         `json:"document_key"`
	Version  int64          `json:"version"`
	Op       string         `json:"op,omitempty"`
	Title    string         `json:"title,omitempty"`
	Source   string         `json:"source,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
	Chunks   []hostileChunk `json:"chunks,omitempty"`
}

type hostileChunk struct {
	Text     string         `json:"text"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// line is the document as a JSON line for `projector publish`, with <, >
// and & as they are.
func (h hostile) line(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// The strings every field of the hostile documents is made of.
var injections = []string{
	`'}) DETACH DELETE n //`,
	`'; DROP TABLE chunks; --`,
	`"; DROP TABLE documents; --`,
	`\'); MATCH (n) DETACH DELETE n; //`,
	`$1 $2 $param {k} {{.Title}} %s %n %v ${jndi:ldap://x/a}`,
	`back\slash \\ \" \n \u0000 as text`,
	"tab\tnew line\ncarriage return\r bell\a",
	"rtl \u202e override, zero width \u200b, bom \ufeff, combining e\u0301, emoji \U0001F680",
	`<script>alert(1)</script> & &amp;`,
}

// TestHostileInputIsData publishes documents whose keys, titles, sources,
// metadata and texts are made of Cypher and SQL fragments, quotes,
// backslashes, control characters and very long strings, through the real
// `projector publish` and `projector run`. Each store must hold every
// string byte for byte, nothing may have run as a statement (the tables,
// the other documents and the constraints are intact), and what the
// contract forbids (NUL characters, invalid UTF-8, keys over 512 bytes) is
// dead-lettered with its reason. A withdrawal and a new version of
// hostile documents then remove and replace exactly their chunks.
func TestHostileInputIsData(t *testing.T) {
	w := newWorld(t, 1)
	long := strings.Repeat(strings.Join(injections, " | ")+" ", 400) // about 100 KB
	metadata := map[string]any{
		"num": 1.5, "int": 7.0, "yes": true, "nothing": nil, "long": long[:10000],
	}
	for i, s := range injections {
		metadata[s] = injections[(i+1)%len(injections)]
	}
	canary := hostile{Key: w.key("canary"), Version: 1, Title: "canary", Chunks: []hostileChunk{{Text: "still here"}, {Text: "me too"}}}
	docs := []hostile{canary}
	for i, s := range injections {
		docs = append(docs, hostile{
			Key: w.key(s), Version: int64(i + 1), Title: s, Source: injections[(i+2)%len(injections)], Metadata: metadata,
			Chunks: []hostileChunk{{Text: s, Metadata: map[string]any{s: s}}, {Text: long}, {Text: "MATCH (n) DETACH DELETE n"}},
		})
	}
	// The longest key the contract allows, and a title of 200 KB.
	maxKey := w.key("max-")
	maxKey += strings.Repeat("'", 512-len(maxKey))
	docs = append(docs, hostile{Key: maxKey, Version: 1, Title: long + long, Chunks: []hostileChunk{{Text: "x"}}})

	bad := map[string]string{ // key -> the dead-letter reason
		w.key("nul-title"):   "nul_character",
		w.key("nul-meta"):    "nul_character",
		w.key("bad-utf8"):    "invalid_utf8",
		w.key("too-long-"):   "invalid_key",
		w.key("nul-key\x00"): "nul_character",
	}
	tooLong := w.key("too-long-") + strings.Repeat("k", 513-len(w.key("too-long-")))
	var lines []string
	for _, d := range docs {
		lines = append(lines, d.line(t))
	}
	lines = append(lines,
		fmt.Sprintf(`{"document_key":%q,"version":1,"title":"a\u0000b","chunks":[{"text":"x"}]}`, w.key("nul-title")),
		fmt.Sprintf(`{"document_key":%q,"version":1,"metadata":{"k":"\u0000"},"chunks":[{"text":"x"}]}`, w.key("nul-meta")),
		fmt.Sprintf("{\"document_key\":%q,\"version\":1,\"title\":\"\xff\xfe\xed\xa0\x80\",\"chunks\":[{\"text\":\"x\"}]}", w.key("bad-utf8")),
		fmt.Sprintf(`{"document_key":%q,"version":1,"chunks":[{"text":"x"}]}`, tooLong),
		fmt.Sprintf(`{"document_key":"%s\u0000","version":1,"chunks":[{"text":"x"}]}`, w.key("nul-key")),
	)
	w.publishFile(lines)

	// The chunk text goes to the graph too, so that it is checked as data
	// there as well.
	p := w.start(nil, "--graph-chunk-text")
	w.waitDrained(p, 2*time.Minute)
	for _, d := range docs {
		checkStored(t, w, d)
	}
	checkIntact(t, w, len(docs))

	letters := w.deadLetters()
	got := map[string]string{}
	for _, l := range letters {
		key := string(l.Key)
		if key == tooLong {
			key = w.key("too-long-")
		}
		got[key] = header(l, dlq.HeaderReason)
	}
	if !reflect.DeepEqual(got, bad) {
		t.Errorf("dead letters by key and reason:\n got %q\nwant %q", got, bad)
	}

	// Withdraw one hostile document and replace another: exactly theirs
	// change.
	gone, next := docs[1], docs[2]
	next.Version++
	next.Chunks = []hostileChunk{{Text: injections[0] + injections[1]}}
	w.publishFile([]string{hostile{Key: gone.Key, Version: gone.Version, Op: "withdraw"}.line(t), next.line(t)})
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	checkGone(t, w, gone.Key)
	checkStored(t, w, next)
	checkStored(t, w, canary)
	checkIntact(t, w, len(docs)-1)
}

// checkStored requires each store to hold d exactly: its key, title,
// source, metadata, and chunks in order with their texts and metadata.
func checkStored(t *testing.T, w *world, d hostile) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("%.40q", strings.TrimPrefix(d.Key, w.prefix))
	wantTexts := make([]string, len(d.Chunks))
	for i, c := range d.Chunks {
		wantTexts[i] = c.Text
	}

	// PostgreSQL
	var title, source string
	var version int64
	var md []byte
	err := w.pg.QueryRow(ctx, "SELECT version, title, source, metadata FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+
		" WHERE document_key = $1 AND status = 'live'", d.Key).Scan(&version, &title, &source, &md)
	if err != nil {
		t.Errorf("%s: PostgreSQL: %v", name, err)
	} else {
		same(t, name+": PostgreSQL", version, d.Version, title, d.Title, source, d.Source)
		sameJSON(t, name+": PostgreSQL metadata", md, d.Metadata)
	}
	rows, err := w.pg.Query(ctx, "SELECT text, metadata FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize()+
		" WHERE document_key = $1 ORDER BY ordinal", d.Key)
	if err != nil {
		t.Fatal(err)
	}
	var pgTexts []string
	var text string
	i := 0
	_, err = pgx.ForEachRow(rows, []any{&text, &md}, func() error {
		pgTexts = append(pgTexts, text)
		if i < len(d.Chunks) {
			sameJSON(t, name+": PostgreSQL chunk metadata", md, d.Chunks[i].Metadata)
		}
		i++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sameTexts(t, name+": PostgreSQL chunks", pgTexts, wantTexts)

	// Neo4j
	res, err := neo4j.ExecuteQuery(ctx, w.neo, `
MATCH (d:Document {key: $key})
OPTIONAL MATCH (d)-[:HAS_CHUNK]->(c:Chunk)
WITH d, c ORDER BY c.ordinal
RETURN d.version AS version, d.title AS title, d.source AS source, d.metadata AS metadata,
       collect(c.text) AS texts, collect(coalesce(c.metadata, '')) AS chunkMetadata`,
		map[string]any{"key": d.Key}, neo4j.EagerResultTransformer)
	switch {
	case err != nil:
		t.Errorf("%s: Neo4j: %v", name, err)
	case len(res.Records) != 1:
		t.Errorf("%s: Neo4j holds %d documents of the key, want 1", name, len(res.Records))
	default:
		r := res.Records[0].AsMap()
		title, _ := r["title"].(string)
		source, _ := r["source"].(string)
		version, _ := r["version"].(int64)
		same(t, name+": Neo4j", version, d.Version, title, d.Title, source, d.Source)
		mdText, _ := r["metadata"].(string)
		if mdText == "" {
			mdText = "null"
		}
		sameJSON(t, name+": Neo4j metadata", []byte(mdText), d.Metadata)
		var texts []string
		for _, x := range r["texts"].([]any) {
			texts = append(texts, x.(string))
		}
		sameTexts(t, name+": Neo4j chunks", texts, wantTexts)
		for i, x := range r["chunkMetadata"].([]any) {
			if s, _ := x.(string); i < len(d.Chunks) && s != "" {
				sameJSON(t, name+": Neo4j chunk metadata", []byte(s), d.Chunks[i].Metadata)
			}
		}
	}

	// Qdrant
	pts, err := w.qd.Scroll(ctx, &qdrant.ScrollPoints{
		CollectionName: w.collection, Limit: qdrant.PtrOf(uint32(100)), WithPayload: qdrant.NewWithPayload(true),
		Filter: &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", d.Key)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(pts, func(i, j int) bool {
		return pts[i].GetPayload()["ordinal"].GetIntegerValue() < pts[j].GetPayload()["ordinal"].GetIntegerValue()
	})
	var qdTexts []string
	for _, p := range pts {
		pl := p.GetPayload()
		qdTexts = append(qdTexts, pl["text"].GetStringValue())
		same(t, name+": Qdrant", pl["version"].GetIntegerValue(), d.Version, pl["title"].GetStringValue(), d.Title,
			pl["source"].GetStringValue(), d.Source)
		if got := pl["document_key"].GetStringValue(); got != d.Key {
			t.Errorf("%s: Qdrant document_key %.60q, want %.60q", name, got, d.Key)
		}
	}
	sameTexts(t, name+": Qdrant chunks", qdTexts, wantTexts)
}

func same(t *testing.T, where string, version, wantVersion int64, title, wantTitle, source, wantSource string) {
	t.Helper()
	if version != wantVersion {
		t.Errorf("%s: version %d, want %d", where, version, wantVersion)
	}
	if title != wantTitle {
		t.Errorf("%s: title %.80q (%d bytes), want %.80q (%d bytes)", where, title, len(title), wantTitle, len(wantTitle))
	}
	if source != wantSource {
		t.Errorf("%s: source %.80q, want %.80q", where, source, wantSource)
	}
}

func sameTexts(t *testing.T, where string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d chunks, want %d", where, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: chunk %d text %.80q (%d bytes), want %.80q (%d bytes)", where, i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}

// sameJSON compares stored JSON with the metadata that was sent.
func sameJSON(t *testing.T, where string, stored []byte, want map[string]any) {
	t.Helper()
	var got map[string]any
	if len(stored) > 0 {
		if err := json.Unmarshal(stored, &got); err != nil {
			t.Errorf("%s: %v", where, err)
			return
		}
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %.200v, want %.200v", where, got, want)
	}
}

// checkIntact requires the projector's tables and constraints to exist and
// each store to hold exactly docs documents of this world.
func checkIntact(t *testing.T, w *world, docs int) {
	t.Helper()
	ctx := context.Background()
	var tables, live int
	err := w.pg.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('documents', 'chunks', 'ledger')`,
		w.schema).Scan(&tables)
	if err != nil || tables != 3 {
		t.Fatalf("PostgreSQL tables of the schema: %d (%v), want documents, chunks and ledger", tables, err)
	}
	if err := w.pg.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+" WHERE status = 'live'").Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != docs {
		t.Errorf("PostgreSQL holds %d live documents, want %d", live, docs)
	}
	res, err := neo4j.ExecuteQuery(ctx, w.neo, `MATCH (d:Document) WHERE d.key STARTS WITH $p RETURN count(d) AS n`,
		map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != int64(docs) {
		t.Errorf("Neo4j holds %d documents of the test, want %d", n, docs)
	}
	res, err = neo4j.ExecuteQuery(ctx, w.neo, `SHOW CONSTRAINTS YIELD name WHERE name IN ['document_key', 'chunk_id'] RETURN count(*) AS n`,
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 2 {
		t.Errorf("Neo4j has %d of the projector's two constraints", n)
	}
	facets, err := w.qd.Facet(ctx, &qdrant.FacetCounts{CollectionName: w.collection, Key: "document_key", Limit: qdrant.PtrOf(uint64(1000)), Exact: qdrant.PtrOf(true)})
	if err != nil {
		t.Fatal(err)
	}
	// The exact facet also lists values whose points were all deleted,
	// with count 0.
	held := 0
	for _, f := range facets {
		if f.GetCount() > 0 {
			held++
		}
	}
	if held != docs {
		t.Errorf("Qdrant holds points of %d documents, want %d", held, docs)
	}
}

// checkGone requires that no store holds anything of key but the
// relational row that remembers the withdrawal.
func checkGone(t *testing.T, w *world, key string) {
	t.Helper()
	ctx := context.Background()
	var chunks int
	var status string
	err := w.pg.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize()+" WHERE document_key = $1), "+
		"(SELECT status FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+" WHERE document_key = $1)", key).Scan(&chunks, &status)
	if err != nil || chunks != 0 || status != "withdrawn" {
		t.Errorf("PostgreSQL after the withdrawal: %d chunks, status %q (%v), want 0 and withdrawn", chunks, status, err)
	}
	res, err := neo4j.ExecuteQuery(ctx, w.neo, `OPTIONAL MATCH (d:Document {key: $k}) OPTIONAL MATCH (c:Chunk {document_key: $k}) RETURN count(d) AS d, count(c) AS c`,
		map[string]any{"k": key}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Records[0].AsMap(); m["d"] != int64(0) || m["c"] != int64(0) {
		t.Errorf("Neo4j after the withdrawal holds %v", m)
	}
	n, err := w.qd.Count(ctx, &qdrant.CountPoints{CollectionName: w.collection, Exact: qdrant.PtrOf(true),
		Filter: &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", key)}}})
	if err != nil || n != 0 {
		t.Errorf("Qdrant after the withdrawal holds %d points (%v), want 0", n, err)
	}
}
