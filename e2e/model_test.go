package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
)

// doc is one generated document event.
type doc struct {
	Key       string
	Version   int64
	Withdraw  bool
	Tombstone bool
	Title     string
	// Chunks, or Text when UseText: the two ways an event carries content.
	Chunks  []string
	Text    string
	UseText bool
}

// value is the record value of the event (nil for a tombstone).
func (d doc) value() []byte {
	if d.Tombstone {
		return nil
	}
	m := map[string]any{"document_key": d.Key, "version": d.Version}
	if d.Withdraw {
		m["op"] = "withdraw"
	} else {
		m["title"] = d.Title
		if d.UseText {
			m["text"] = d.Text
		} else {
			chunks := make([]map[string]any, len(d.Chunks))
			for i, c := range d.Chunks {
				chunks[i] = map[string]any{"text": c}
			}
			m["chunks"] = chunks
		}
	}
	b, _ := json.Marshal(m)
	return b
}

func (d doc) record() *kgo.Record {
	return &kgo.Record{Key: []byte(d.Key), Value: d.value()}
}

// content identifies what the event says about the document, the way the
// projector's content hash does: same content, same string.
func (d doc) content() string {
	if d.UseText {
		return "t|" + d.Title + "|" + d.Text
	}
	return "c|" + d.Title + "|" + strings.Join(d.Chunks, "\x1f")
}

// chunkTexts are the chunks the projector stores for the event.
func (d doc) chunkTexts() []string {
	if !d.UseText {
		return d.Chunks
	}
	var out []string
	for _, c := range (event.Splitter{MaxBytes: event.DefaultChunkBytes}).Split(d.Text) {
		out = append(out, c.Text)
	}
	return out
}

// model is the contract's section 3 as a plain in-memory state machine.
type model struct {
	docs map[string]*modelDoc
	// overwrite selects the --on-conflict overwrite policy (default dlq).
	overwrite bool
	// outcomes counts records by the outcome the projector must report.
	outcomes map[string]int
}

type modelDoc struct {
	version   int64
	withdrawn bool
	content   string
	title     string
	chunks    []string
}

func newModel() *model { return &model{docs: map[string]*modelDoc{}, outcomes: map[string]int{}} }

// apply follows one event and returns its outcome.
func (m *model) apply(d doc) string {
	out := m.decide(d)
	m.outcomes[out]++
	return out
}

func (m *model) decide(d doc) string {
	st := m.docs[d.Key]
	switch {
	case d.Tombstone:
		v := int64(0)
		if st != nil {
			v = st.version
		}
		m.docs[d.Key] = &modelDoc{version: v, withdrawn: true}
		return "withdrawn"
	case d.Withdraw:
		if st != nil && d.Version < st.version {
			return "stale"
		}
		m.docs[d.Key] = &modelDoc{version: d.Version, withdrawn: true}
		return "withdrawn"
	case st != nil && st.withdrawn && d.Version <= st.version, st != nil && d.Version < st.version:
		return "stale"
	case st != nil && d.Version == st.version && d.content() != st.content:
		if m.overwrite {
			m.docs[d.Key] = &modelDoc{version: d.Version, content: d.content(), title: d.Title, chunks: d.chunkTexts()}
		}
		return "conflict"
	case st != nil && d.Version == st.version:
		return "redelivered"
	default:
		m.docs[d.Key] = &modelDoc{version: d.Version, content: d.content(), title: d.Title, chunks: d.chunkTexts()}
		return "projected"
	}
}

// expectedChunk is one chunk the stores must hold.
type expectedChunk struct {
	key     string
	version int64
	ordinal int
	text    string
}

// expected lists the chunks every store must hold, by chunk id.
func (m *model) expected() map[string]expectedChunk {
	out := map[string]expectedChunk{}
	for key, d := range m.docs {
		if d.withdrawn {
			continue
		}
		for i, text := range d.chunks {
			out[keys.ChunkID(key, d.version, i).String()] = expectedChunk{key: key, version: d.version, ordinal: i, text: text}
		}
	}
	return out
}

// checkStores compares every store of the world with the model: exactly the
// expected chunks, with their payloads, and nothing else.
func (w *world) checkStores(m *model) {
	w.t.Helper()
	want := m.expected()
	w.checkIndex(want)
	w.checkGraph(m, want)
	w.checkRelational(m, want)
}

func (w *world) checkIndex(want map[string]expectedChunk) {
	w.t.Helper()
	got := map[string]expectedChunk{}
	var offset *qdrant.PointId
	for {
		pts, next, err := w.qd.ScrollAndOffset(context.Background(), &qdrant.ScrollPoints{
			CollectionName: w.collection, Offset: offset, Limit: qdrant.PtrOf(uint32(2000)),
			WithPayload: qdrant.NewWithPayloadInclude("document_key", "version", "ordinal", "text"),
		})
		if err != nil {
			w.t.Fatalf("scroll index: %v", err)
		}
		for _, p := range pts {
			pl := p.GetPayload()
			got[p.GetId().GetUuid()] = expectedChunk{
				key: pl["document_key"].GetStringValue(), version: pl["version"].GetIntegerValue(),
				ordinal: int(pl["ordinal"].GetIntegerValue()), text: pl["text"].GetStringValue(),
			}
		}
		if next == nil {
			break
		}
		offset = next
	}
	compareChunks(w, "index", got, want)
}

func (w *world) checkGraph(m *model, want map[string]expectedChunk) {
	w.t.Helper()
	ctx := context.Background()
	res, err := neo4j.ExecuteQuery(ctx, w.neo, `
MATCH (c:Chunk) WHERE c.document_key STARTS WITH $p
OPTIONAL MATCH (d:Document {key: c.document_key})-[:HAS_CHUNK]->(c)
RETURN c.id AS id, c.document_key AS key, c.version AS version, c.ordinal AS ordinal, c.text AS text, d IS NOT NULL AS linked`,
		map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		w.t.Fatalf("read graph: %v", err)
	}
	got := map[string]expectedChunk{}
	for _, r := range res.Records {
		v := r.AsMap()
		id := v["id"].(string)
		if linked, _ := v["linked"].(bool); !linked {
			w.t.Errorf("graph: chunk %s has no HAS_CHUNK from its document", id)
		}
		if text, ok := v["text"]; ok && text != nil {
			w.t.Errorf("graph: chunk %s has text %q, want none (--graph-chunk-text is off by default)", id, text)
		}
		got[id] = expectedChunk{key: v["key"].(string), version: v["version"].(int64), ordinal: int(v["ordinal"].(int64))}
	}
	// The graph holds no chunk text by default; the index and the
	// relational store hold it.
	textless := make(map[string]expectedChunk, len(want))
	for id, c := range want {
		c.text = ""
		textless[id] = c
	}
	compareChunks(w, "graph", got, textless)

	res, err = neo4j.ExecuteQuery(ctx, w.neo, `MATCH (d:Document) WHERE d.key STARTS WITH $p RETURN d.key AS key, d.version AS version`,
		map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		w.t.Fatalf("read graph documents: %v", err)
	}
	docs := map[string]int64{}
	for _, r := range res.Records {
		v := r.AsMap()
		docs[v["key"].(string)] = v["version"].(int64)
	}
	for key, d := range m.docs {
		v, ok := docs[key]
		switch {
		case d.withdrawn && ok:
			w.t.Errorf("graph: withdrawn document %q is still present", key)
		case !d.withdrawn && (!ok || v != d.version):
			w.t.Errorf("graph: document %q has version %d (present %v), want %d", key, v, ok, d.version)
		}
		delete(docs, key)
	}
	for key := range docs {
		w.t.Errorf("graph: unexpected document %q", key)
	}
}

func (w *world) checkRelational(m *model, want map[string]expectedChunk) {
	w.t.Helper()
	ctx := context.Background()
	rows, err := w.pg.Query(ctx, "SELECT chunk_id::text, document_key, version, ordinal, text FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize())
	if err != nil {
		w.t.Fatalf("read chunks: %v", err)
	}
	got := map[string]expectedChunk{}
	var id string
	var c expectedChunk
	_, err = pgx.ForEachRow(rows, []any{&id, &c.key, &c.version, &c.ordinal, &c.text}, func() error {
		got[id] = c
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	compareChunks(w, "relational", got, want)

	rows, err = w.pg.Query(ctx, "SELECT document_key, version, status, chunk_count FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize())
	if err != nil {
		w.t.Fatalf("read documents: %v", err)
	}
	type row struct {
		version int64
		status  string
		count   int
	}
	docs := map[string]row{}
	var key string
	var r row
	_, err = pgx.ForEachRow(rows, []any{&key, &r.version, &r.status, &r.count}, func() error {
		docs[key] = r
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	for key, d := range m.docs {
		want := row{version: d.version, status: "live", count: len(d.chunks)}
		if d.withdrawn {
			want = row{version: d.version, status: "withdrawn"}
		}
		if got := docs[key]; got != want {
			w.t.Errorf("relational: document %q = %+v, want %+v", key, got, want)
		}
		delete(docs, key)
	}
	for key := range docs {
		w.t.Errorf("relational: unexpected document %q", key)
	}
}

func compareChunks(w *world, store string, got, want map[string]expectedChunk) {
	w.t.Helper()
	var problems []string
	for id, c := range want {
		g, ok := got[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing %s (%s v%d #%d)", id, c.key, c.version, c.ordinal))
		case g != c:
			problems = append(problems, fmt.Sprintf("chunk %s = %+v, want %+v", id, g, c))
		}
	}
	for id, c := range got {
		if _, ok := want[id]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected %s (%s v%d #%d)", id, c.key, c.version, c.ordinal))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
		}
		w.t.Errorf("%s holds %d chunks, want %d:\n  %s", store, len(got), len(want), strings.Join(problems, "\n  "))
	}
}
