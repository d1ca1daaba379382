package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/testenv"
)

const (
	embedTestModel = "e2e-model"
	embedTestKey   = "e2e-secret-key"
	embedTestDim   = 8
)

// embedServer is an OpenAI-compatible embeddings endpoint in the test
// process. Like a real model it is not bit-for-bit deterministic: every
// request shifts its vectors a little, so a vector that was computed again
// instead of taken from the cache shows in the stores.
type embedServer struct {
	srv     *httptest.Server
	latency time.Duration
	// refuse, when set, makes the server answer 400 to a request holding
	// a text that contains it.
	refuse string

	mu     sync.Mutex
	calls  int // requests, the probes left out
	texts  int // texts in those requests
	probes int
	given  map[string][][]float32 // every vector returned for a text
}

func newEmbedServer(t *testing.T, latency time.Duration) *embedServer {
	t.Helper()
	s := &embedServer{latency: latency, given: map[string][][]float32{}}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *embedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	switch {
	case r.URL.Path != "/v1/embeddings":
		http.Error(w, `{"error":"no such route"}`, http.StatusNotFound)
		return
	case r.Header.Get("Authorization") != "Bearer "+embedTestKey:
		http.Error(w, `{"error":{"message":"invalid API key"}}`, http.StatusUnauthorized)
		return
	case json.NewDecoder(r.Body).Decode(&in) != nil || in.Model != embedTestModel:
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	probe := slices.Equal(in.Input, []string{embed.ProbeText})
	if probe {
		s.probes++
	} else {
		s.calls++
		s.texts += len(in.Input)
	}
	generation := s.calls
	s.mu.Unlock()
	if !probe {
		time.Sleep(s.latency)
	}
	if s.refuse != "" && slices.ContainsFunc(in.Input, func(t string) bool { return strings.Contains(t, s.refuse) }) {
		http.Error(w, `{"error":{"message":"input refused by the model"}}`, http.StatusBadRequest)
		return
	}
	vecs, _ := embed.NewHashing(embedTestDim).Embed(r.Context(), in.Input)
	type item struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	data := make([]item, len(vecs))
	s.mu.Lock()
	for i, v := range vecs {
		v[0] += float32(generation) / 1024
		s.given[in.Input[i]] = append(s.given[in.Input[i]], v)
		// Out of order, as the API allows.
		data[len(vecs)-1-i] = item{Index: i, Embedding: v}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": in.Model})
}

// counts returns the requests and texts since the last reset, and the
// probes.
func (s *embedServer) counts() (calls, texts, probes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.texts, s.probes
}

func (s *embedServer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls, s.texts, s.probes = 0, 0, 0
}

// wasGiven reports whether v is a vector the server returned for text.
func (s *embedServer) wasGiven(text string, v []float32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.given[text], func(g []float32) bool { return slices.Equal(g, v) })
}

// embedArgs are the flags that point the service at s.
func (s *embedServer) embedArgs(extra ...string) []string {
	return append([]string{"--embedder", "http", "--embed-url", s.srv.URL, "--embed-model", embedTestModel,
		"--embed-dim", fmt.Sprint(embedTestDim), "--embed-batch", "16"}, extra...)
}

var embedEnv = []string{"PROJECTOR_EMBED_API_KEY=" + embedTestKey}

// embedDocs returns n documents of 1 to 4 chunks; every fifth also holds a
// chunk that many documents share.
func embedDocs(w *world, n int) (recs []*kgo.Record, texts map[string]bool) {
	texts = map[string]bool{}
	for i := range n {
		var chunks []map[string]string
		for j := range 1 + i%4 {
			chunks = append(chunks, map[string]string{"text": fmt.Sprintf("document %d, chunk %d: %s", i, j, strings.Repeat("words ", 10+j))})
		}
		if i%5 == 0 {
			chunks = append(chunks, map[string]string{"text": "a boilerplate paragraph every fifth document repeats"})
		}
		for _, c := range chunks {
			texts[c["text"]] = true
		}
		key := w.key(fmt.Sprintf("emb-%04d", i))
		value, _ := json.Marshal(map[string]any{"document_key": key, "version": 1, "title": "doc", "chunks": chunks})
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: value})
	}
	return recs, texts
}

// storedChunk is a chunk as one store holds it.
type storedChunk struct {
	text   string
	vector []float32
}

// indexChunks scrolls the world's collection with vectors.
func indexChunks(t *testing.T, w *world) map[string]storedChunk {
	t.Helper()
	out := map[string]storedChunk{}
	var offset *qdrant.PointId
	for {
		pts, next, err := w.qd.ScrollAndOffset(context.Background(), &qdrant.ScrollPoints{
			CollectionName: w.collection, Offset: offset, Limit: qdrant.PtrOf(uint32(1000)),
			WithPayload: qdrant.NewWithPayloadInclude("text"), WithVectors: qdrant.NewWithVectors(true),
		})
		if err != nil {
			t.Fatalf("scroll index: %v", err)
		}
		for _, p := range pts {
			v := p.GetVectors().GetVector()
			data := v.GetDense().GetData()
			if data == nil {
				data = v.GetData()
			}
			out[p.GetId().GetUuid()] = storedChunk{text: p.GetPayload()["text"].GetStringValue(), vector: data}
		}
		if next == nil {
			return out
		}
		offset = next
	}
}

// relationalChunks reads the chunks table.
func relationalChunks(t *testing.T, w *world) map[string]storedChunk {
	t.Helper()
	rows, err := w.pg.Query(context.Background(), "SELECT chunk_id::text, text, vector FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize())
	if err != nil {
		t.Fatalf("read chunks: %v", err)
	}
	out := map[string]storedChunk{}
	var id, text string
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &text, &raw}, func() error {
		v, err := postgres.DecodeVector(raw)
		out[id] = storedChunk{text: text, vector: v}
		return err
	})
	if err != nil {
		t.Fatalf("read chunks: %v", err)
	}
	return out
}

// rewindGroup commits the start offset of every partition for the
// world's group, as `projector replay --to earliest` does. The group must
// have no member.
func rewindGroup(t *testing.T, w *world) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	starts, err := w.adm.ListStartOffsets(ctx, w.topic)
	if err != nil {
		t.Fatal(err)
	}
	offsets := kadm.Offsets{}
	starts.Each(func(o kadm.ListedOffset) {
		offsets.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	for {
		resp, err := w.adm.CommitOffsets(ctx, w.group, offsets)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("rewind group %s: %v", w.group, err)
		}
		time.Sleep(500 * time.Millisecond) // the last member may still be leaving
	}
}

// TestEmbedderHTTPReplayUsesCache projects documents through an HTTP
// embedding endpoint, checks that the index and the relational store
// carry the endpoint's vectors, then replays the topic from the start and
// checks that the replay asked the endpoint for nothing (the probe aside)
// and left every vector as it was.
func TestEmbedderHTTPReplayUsesCache(t *testing.T) {
	w := newWorld(t, 2)
	latency := time.Duration(testenv.Size(t, "E2E_EMBED_LATENCY_MS", 0, 0)) * time.Millisecond
	es := newEmbedServer(t, latency)
	n := testenv.Size(t, "E2E_EMBED_DOCUMENTS", 60, 0)
	recs, texts := embedDocs(w, n)
	w.produce(recs...)

	start := time.Now()
	p := w.start(embedEnv, es.embedArgs("--batch-records", "20")...)
	w.waitDrained(p, 3*time.Minute)
	cold := time.Since(start)
	coldEmbed := embedSeconds(t, p)
	coldCalls, coldTexts, probes := es.counts()
	p.stop()
	if probes != 1 {
		t.Errorf("start-up probes = %d, want 1", probes)
	}
	// Each distinct text once; the shared one may race between the
	// batches handled at once: two partitions, two batches in flight each.
	if racing := 2 * 2; coldTexts < len(texts) || coldTexts > len(texts)+racing-1 {
		t.Errorf("texts sent to the endpoint = %d, want each of the %d distinct texts once", coldTexts, len(texts))
	}

	idx, rel := indexChunks(t, w), relationalChunks(t, w)
	if len(idx) != len(rel) || len(idx) == 0 {
		t.Fatalf("index holds %d chunks, relational %d; want the same, more than 0", len(idx), len(rel))
	}
	byText := map[string][]float32{}
	for id, c := range idx {
		r, ok := rel[id]
		if !ok {
			t.Fatalf("chunk %s is in the index, not in the relational store", id)
		}
		if !es.wasGiven(r.text, r.vector) {
			t.Errorf("chunk %s: relational vector %v is not one the endpoint returned for %q", id, r.vector, r.text)
		}
		// Qdrant keeps cosine vectors normalised.
		if !closeTo(c.vector, unit(r.vector)) {
			t.Errorf("chunk %s: index vector %v, want the relational one normalised: %v", id, c.vector, unit(r.vector))
		}
		if prev, ok := byText[r.text]; ok && !slices.Equal(prev, r.vector) {
			t.Errorf("text %q has two vectors: %v and %v; want one, the cache's", r.text, prev, r.vector)
		}
		byText[r.text] = r.vector
	}
	if len(byText) != len(texts) {
		t.Errorf("distinct texts in the index = %d, want %d", len(byText), len(texts))
	}

	// Replay the whole topic.
	rewindGroup(t, w)
	es.reset()
	start = time.Now()
	p = w.start(embedEnv, es.embedArgs("--batch-records", "20")...)
	w.waitDrained(p, 3*time.Minute)
	replay := time.Since(start)
	replayEmbed := embedSeconds(t, p)
	metrics := p.metrics()
	readyCode, readyBody := p.get("/readyz")
	p.stop()
	calls, _, probes := es.counts()
	if calls != 0 || probes != 1 {
		t.Errorf("replay: %d embedding requests and %d probes, want 0 requests and 1 probe", calls, probes)
	}
	if got := metrics[`projector_records_total{outcome="redelivered"}`]; got != float64(n) {
		t.Errorf("replay: redelivered records = %v, want %d", got, n)
	}
	if got := metrics["projector_embed_cache_misses_total"]; got != 0 {
		t.Errorf("replay: cache misses = %v, want 0", got)
	}
	if got := metrics["projector_embed_cache_hits_total"]; got < float64(len(texts)) {
		t.Errorf("replay: cache hits = %v, want at least %d", got, len(texts))
	}
	if !sameChunks(indexChunks(t, w), idx) || !sameChunks(relationalChunks(t, w), rel) {
		t.Errorf("the replay changed stored vectors; want every vector as the first projection left it")
	}
	if strings.Contains(p.log.String(), embedTestKey) || strings.Contains(readyBody, embedTestKey) {
		t.Errorf("the API key shows in the service's log or /readyz (%d)", readyCode)
	}
	t.Logf("embedding cache: %d documents, %d chunks, %d distinct texts, %s per request: cold %s (embedding %s) with %d requests; replay %s (embedding %s) with %d requests",
		n, len(idx), len(texts), latency, cold.Round(10*time.Millisecond), coldEmbed.Round(time.Millisecond), coldCalls,
		replay.Round(10*time.Millisecond), replayEmbed.Round(time.Millisecond), calls)

	if testenv.Size(t, "E2E_EMBED_BENCH", 0, 0) == 0 {
		return
	}
	// For docs/benchmarks.md: the same replay without the cache.
	rewindGroup(t, w)
	es.reset()
	start = time.Now()
	p = w.start(embedEnv, es.embedArgs("--batch-records", "20", "--embed-cache=false")...)
	w.waitDrained(p, 10*time.Minute)
	uncached := time.Since(start)
	uncachedEmbed := embedSeconds(t, p)
	p.stop()
	calls, _, _ = es.counts()
	t.Logf("embedding cache: replay without the cache %s (embedding %s) with %d requests", uncached.Round(10*time.Millisecond), uncachedEmbed.Round(time.Millisecond), calls)
}

// embedSeconds is the time the service spent computing vectors
// (projector_embed_seconds_sum).
func embedSeconds(t *testing.T, p *proc) time.Duration {
	t.Helper()
	code, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "projector_embed_seconds_sum "); ok {
			var s float64
			if _, err := fmt.Sscan(v, &s); err == nil {
				return time.Duration(s * float64(time.Second))
			}
		}
	}
	t.Fatalf("no projector_embed_seconds_sum in /metrics (%d)", code)
	return 0
}

func unit(v []float32) []float32 {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) / math.Sqrt(n))
	}
	return out
}

func closeTo(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			return false
		}
	}
	return true
}

func sameChunks(a, b map[string]storedChunk) bool {
	if len(a) != len(b) {
		return false
	}
	for id, c := range a {
		d, ok := b[id]
		if !ok || c.text != d.text || !slices.Equal(c.vector, d.vector) {
			return false
		}
	}
	return true
}

// TestEmbedderHTTPRefusedInput: the endpoint refuses one document's text
// (400); that record goes to the dead-letter topic with reason
// store_rejected and the others are projected.
func TestEmbedderHTTPRefusedInput(t *testing.T) {
	w := newWorld(t, 1)
	es := newEmbedServer(t, 0)
	es.refuse = "REFUSE-ME"
	var recs []*kgo.Record
	for i, text := range []string{"a fine text", "a text the model refuses: REFUSE-ME", "another fine text"} {
		key := w.key(fmt.Sprint("doc-", i))
		value, _ := json.Marshal(map[string]any{"document_key": key, "version": 1, "chunks": []map[string]string{{"text": text}}})
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: value})
	}
	w.produce(recs...)
	p := w.start(embedEnv, es.embedArgs()...)
	w.waitDrained(p, 2*time.Minute)
	p.stop()

	letters := w.deadLetters()
	if len(letters) != 1 || string(letters[0].Key) != w.key("doc-1") || header(letters[0], dlq.HeaderReason) != "store_rejected" {
		var got []string
		for _, l := range letters {
			got = append(got, string(l.Key)+" "+header(l, dlq.HeaderReason))
		}
		t.Fatalf("dead letters = %q, want one for %s with reason store_rejected", got, w.key("doc-1"))
	}
	if d := header(letters[0], dlq.HeaderDetail); !strings.Contains(d, "input refused by the model") {
		t.Errorf("dead letter detail = %q, want the endpoint's message", d)
	}
	var stored []string
	for _, c := range relationalChunks(t, w) {
		stored = append(stored, c.text)
	}
	slices.Sort(stored)
	if want := []string{"a fine text", "another fine text"}; !slices.Equal(stored, want) {
		t.Errorf("relational chunks = %q, want %q", stored, want)
	}
}

// TestEmbedderHTTPWrongDimensionStops: an endpoint whose vectors do not
// have the configured dimension stops the service at start, saying how to
// fix it.
func TestEmbedderHTTPWrongDimensionStops(t *testing.T) {
	w := newWorld(t, 1)
	es := newEmbedServer(t, 0)
	args := es.embedArgs()
	args[slices.Index(args, "--embed-dim")+1] = "16"
	p := w.start(embedEnv, args...)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the service did not stop within a minute")
	}
	if p.err == nil {
		t.Errorf("exit status 0, want a failure")
	}
	if out := p.log.String(); !strings.Contains(out, "dimension 8") || !strings.Contains(out, "set --embed-dim (or --vector-dim) to 8") {
		t.Errorf("output = %q, want the dimensions and the fix", tail(out, 5))
	}
}
