package embed

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector/projector/internal/project"
)

// endpoint is a test server that speaks the OpenAI embeddings API. Its
// vectors are the hashing embedder's, so each text has a known vector.
type endpoint struct {
	t   *testing.T
	srv *httptest.Server
	dim int
	// fail, when set, may answer a request instead of the default
	// handler; it returns false to let the default answer.
	fail func(w http.ResponseWriter, n int, in []string) bool

	mu       sync.Mutex
	requests [][]string // inputs, in arrival order
	headers  []http.Header
}

func newEndpoint(t *testing.T, dim int, fail func(w http.ResponseWriter, n int, in []string) bool) *endpoint {
	t.Helper()
	e := &endpoint{t: t, dim: dim, fail: fail}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	var in request
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.requests = append(e.requests, in.Input)
	e.headers = append(e.headers, r.Header.Clone())
	n := len(e.requests)
	e.mu.Unlock()
	if e.fail != nil && e.fail(w, n, in.Input) {
		return
	}
	writeVectors(w, in.Input, e.dim)
}

// writeVectors answers with the vectors of in, in reverse order, as
// servers may.
func writeVectors(w http.ResponseWriter, in []string, dim int) {
	vecs, _ := NewHashing(dim).Embed(context.Background(), in)
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	data := make([]item, len(in))
	for i := range in {
		data[len(in)-1-i] = item{Object: "embedding", Index: i, Embedding: vecs[i]}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": "test-model"})
}

func (e *endpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.requests)
}

// inputs returns the inputs of every request so far.
func (e *endpoint) inputs() [][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.requests)
}

// header returns the headers of request i.
func (e *endpoint) header(i int) http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.headers[i]
}

func (e *endpoint) embedder(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = e.srv.URL
	}
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.Dim == 0 {
		cfg.Dim = e.dim
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	}
	h, err := NewHTTP(cfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "text number " + strings.Repeat("x", i)
	}
	return out
}

func requireVectorsOf(t *testing.T, got [][]float32, in []string, dim int) {
	t.Helper()
	want, _ := NewHashing(dim).Embed(context.Background(), in)
	if len(got) != len(want) {
		t.Fatalf("got %d vectors, want %d", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("vector %d = %v, want %v (the vector of %q)", i, got[i], want[i], in[i])
		}
	}
}

func TestEndpointURL(t *testing.T) {
	tests := []struct{ base, want string }{
		{"http://tei:80", "http://tei:80/v1/embeddings"},
		{"http://tei:80/", "http://tei:80/v1/embeddings"},
		{"https://api.openai.com/v1", "https://api.openai.com/v1/embeddings"},
		{"https://api.openai.com/v1/", "https://api.openai.com/v1/embeddings"},
		{"http://ollama:11434/v1/embeddings", "http://ollama:11434/v1/embeddings"},
		{"http://proxy/openai/deployments/x/embeddings?api-version=2024-02-01", "http://proxy/openai/deployments/x/embeddings?api-version=2024-02-01"},
		{"http://host/prefix", "http://host/prefix/v1/embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			u, err := EndpointURL(tt.base)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.String(); got != tt.want {
				t.Errorf("EndpointURL(%q) = %q, want %q", tt.base, got, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "tei:80", "ftp://host", "http://", "http://user:secret@%zz"} {
		if _, err := EndpointURL(bad); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("EndpointURL(%q) error = %v, want an error that does not quote the URL", bad, err)
		}
	}
}

func TestHTTPEmbed(t *testing.T) {
	e := newEndpoint(t, 16, nil)
	h := e.embedder(t, HTTPConfig{APIKey: "sk-test-key"})
	in := []string{"alpha", "beta gamma", "delta"}
	got, err := h.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	requireVectorsOf(t, got, in, 16)
	if got, want := e.header(0).Get("Authorization"), "Bearer sk-test-key"; got != want {
		t.Errorf("Authorization = %q, want %q", got, want)
	}
	if got := e.header(0).Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
}

func TestHTTPBatchesWithBoundedConcurrency(t *testing.T) {
	var inFlight, most atomic.Int32
	e := newEndpoint(t, 8, func(w http.ResponseWriter, _ int, in []string) bool {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	h := e.embedder(t, HTTPConfig{Batch: 10, Concurrency: 2})
	in := texts(45)
	// Two callers at once, like two partitions: the bound is over both.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	results := make([][][]float32, 2)
	for i := range errs {
		wg.Go(func() { results[i], errs[i] = h.Embed(context.Background(), in) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, got := range results {
		requireVectorsOf(t, got, in, 8)
	}
	var sizes []int
	for _, r := range e.inputs() {
		sizes = append(sizes, len(r))
	}
	slices.Sort(sizes)
	if want := []int{5, 5, 10, 10, 10, 10, 10, 10, 10, 10}; !slices.Equal(sizes, want) {
		t.Errorf("request sizes = %v, want %v", sizes, want)
	}
	if got := most.Load(); got > 2 {
		t.Errorf("requests in flight at once = %d, want at most 2", got)
	}
}

// status answers every request with code and body.
func status(code int, body string) func(http.ResponseWriter, int, []string) bool {
	return func(w http.ResponseWriter, _ int, in []string) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
		return true
	}
}

// raw answers every request with 200 and body.
func raw(body string) func(http.ResponseWriter, int, []string) bool {
	return status(http.StatusOK, body)
}

func TestHTTPErrors(t *testing.T) {
	const key = "sk-secret-1234"
	tests := []struct {
		name     string
		fail     func(http.ResponseWriter, int, []string) bool
		kind     project.ErrorKind
		contains string
		requests int // requests the call makes, probes included
	}{
		{"401", status(401, `{"error":{"message":"Incorrect API key provided: `+key+`"}}`), project.Fatal, "PROJECTOR_EMBED_API_KEY", 1},
		{"403", status(403, `{"error":"forbidden"}`), project.Fatal, "403 Forbidden: forbidden", 1},
		{"404", status(404, `{"error":"model \"nope\" not found"}`), project.Fatal, "check --embed-url", 1},
		{"400 for this input", func(w http.ResponseWriter, _ int, in []string) bool {
			if in[0] == ProbeText {
				return false
			}
			return status(400, `{"message":"Input validation error: too long","code":400}`)(w, 0, in)
		}, project.Rejected, "refuses this input: ", 2},
		{"400 for every input", status(400, `{"error":"unknown parameter"}`), project.Fatal, "configuration is at fault", 2},
		{"422 for this input", func(w http.ResponseWriter, _ int, in []string) bool {
			return in[0] != ProbeText && status(422, `{"error":"bad"}`)(w, 0, in)
		}, project.Rejected, "422 Unprocessable Entity", 2},
		{"wrong dimension", func(w http.ResponseWriter, _ int, in []string) bool {
			writeVectors(w, in, 5)
			return true
		}, project.Fatal, "set --embed-dim (or --vector-dim) to 5", 1},
		{"wrong count", func(w http.ResponseWriter, _ int, in []string) bool {
			writeVectors(w, in[1:], 8)
			return true
		}, project.Fatal, "returned 1 vectors for 2 texts", 1},
		{"duplicate index", raw(`{"data":[{"index":0,"embedding":[1,2,3,4,5,6,7,8]},{"index":0,"embedding":[1,2,3,4,5,6,7,8]}]}`), project.Fatal, "index 0", 1},
		{"not JSON", raw(`<html>hello</html>`), project.Fatal, "not an embeddings response", 1},
		{"base64 vectors", raw(`{"data":[{"index":0,"embedding":"AAAA"},{"index":1,"embedding":"AAAA"}]}`), project.Fatal, "not an embeddings response", 1},
		{"too large", raw(`{"data":[` + strings.Repeat(" ", 200<<10) + `]}`), project.Fatal, "larger than", 1},
		{"redirect", func(w http.ResponseWriter, _ int, _ []string) bool {
			w.Header().Set("Location", "http://elsewhere/v1/embeddings")
			w.WriteHeader(http.StatusMovedPermanently)
			return true
		}, project.Fatal, "redirects", 1},
		{"500 until the attempts run out", status(500, `{"error":"boom"}`), project.Transient, "gave up after 3 attempts", 3},
		{"429 until the attempts run out", status(429, `{"error":"slow down"}`), project.Limit, "429 Too Many Requests: slow down", 3},
		{"429 for a used-up quota", status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`), project.Limit, "exceeded your current quota", 3},
		{"501", status(501, ``), project.Fatal, "501 Not Implemented", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, 8, tt.fail)
			h := e.embedder(t, HTTPConfig{APIKey: key, Attempts: 3})
			_, err := h.Embed(context.Background(), []string{"one", "two"})
			if err == nil {
				t.Fatal("Embed succeeded, want an error")
			}
			var se *project.StoreError
			if !errors.As(err, &se) || se.Store != StoreName {
				t.Fatalf("error %v (%T), want a *project.StoreError of store %q", err, err, StoreName)
			}
			if got := project.LimitOf(err); (got != "") != (tt.kind == project.Limit) {
				t.Errorf("limit name = %q, want one exactly for a limit", got)
			}
			if got := project.KindOf(err); got != tt.kind {
				t.Errorf("kind = %s (%v), want %s", got, err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error = %q, want it to contain %q", err, tt.contains)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("error = %q, it contains the API key", err)
			}
			if got := e.count(); got != tt.requests {
				t.Errorf("requests = %d, want %d", got, tt.requests)
			}
		})
	}
}

func TestHTTPRetriesThenSucceeds(t *testing.T) {
	tests := []struct {
		name     string
		fail     func(w http.ResponseWriter, n int, in []string) bool
		capAfter time.Duration // MaxRetryAfter
		minWait  time.Duration
		maxWait  time.Duration
	}{
		{"503 then 502", func(w http.ResponseWriter, n int, in []string) bool {
			return n <= 2 && status(503-n+1, "")(w, n, in)
		}, time.Second, 0, time.Second},
		{"429 with Retry-After seconds", func(w http.ResponseWriter, n int, in []string) bool {
			if n > 1 {
				return false
			}
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}, 5 * time.Second, time.Second, 3 * time.Second},
		{"503 with Retry-After date", func(w http.ResponseWriter, n int, in []string) bool {
			if n > 1 {
				return false
			}
			// HTTP dates have whole seconds: 3 s ahead is over 2 s ahead.
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}, 1500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second},
		{"429 with Retry-After beyond the cap", func(w http.ResponseWriter, n int, in []string) bool {
			if n > 1 {
				return false
			}
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}, 200 * time.Millisecond, 200 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, 8, tt.fail)
			h := e.embedder(t, HTTPConfig{MaxRetryAfter: tt.capAfter})
			in := []string{"a", "b"}
			start := time.Now()
			got, err := h.Embed(context.Background(), in)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			requireVectorsOf(t, got, in, 8)
			if took < tt.minWait || took > tt.maxWait {
				t.Errorf("took %s, want between %s and %s", took, tt.minWait, tt.maxWait)
			}
		})
	}
}

func TestHTTPTimeout(t *testing.T) {
	// slowFirst answers the first n requests after 300 ms.
	slowFirst := func(n int) func(http.ResponseWriter, int, []string) bool {
		return func(_ http.ResponseWriter, i int, _ []string) bool {
			if i <= n {
				time.Sleep(300 * time.Millisecond)
			}
			return false
		}
	}
	t.Run("every attempt times out", func(t *testing.T) {
		e := newEndpoint(t, 8, slowFirst(2))
		h := e.embedder(t, HTTPConfig{Timeout: 50 * time.Millisecond, Attempts: 2})
		start := time.Now()
		_, err := h.Embed(context.Background(), []string{"slow"})
		if project.KindOf(err) != project.Transient || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("error = %v (kind %s), want a transient deadline error", err, project.KindOf(err))
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("took %s, want under 500ms: the timeout cuts each attempt at 50ms (the server answers after 300ms)", took)
		}
	})
	t.Run("a later attempt answers in time", func(t *testing.T) {
		e := newEndpoint(t, 8, slowFirst(2))
		h := e.embedder(t, HTTPConfig{Timeout: 50 * time.Millisecond, Attempts: 3})
		got, err := h.Embed(context.Background(), []string{"slow"})
		if err != nil {
			t.Fatal(err)
		}
		requireVectorsOf(t, got, []string{"slow"}, 8)
	})
}

func TestHTTPSplitsTooLargeRequests(t *testing.T) {
	// Like text-embeddings-inference: 413 for more than 4 inputs, and for a
	// text longer than its model takes.
	e := newEndpoint(t, 8, func(w http.ResponseWriter, n int, in []string) bool {
		if len(in) > 4 || slices.ContainsFunc(in, func(s string) bool { return strings.HasPrefix(s, "LONG") }) {
			return status(413, `{"message":"Input validation error: inputs must have less than 512 tokens","code":413,"type":"Validation"}`)(w, n, in)
		}
		return false
	})
	h := e.embedder(t, HTTPConfig{Batch: 10})
	in := texts(10)
	got, err := h.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	requireVectorsOf(t, got, in, 8)

	_, err = h.Embed(context.Background(), []string{"short", "LONG text"})
	if project.KindOf(err) != project.Rejected || !strings.Contains(err.Error(), "less than 512 tokens") {
		t.Errorf("error = %v (kind %s), want rejected with the endpoint's message", err, project.KindOf(err))
	}
}

func TestHTTPNetworkErrorHidesURLSecrets(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/v1/embeddings?api-key=query-secret"
	srv.Close()
	h, err := NewHTTP(HTTPConfig{URL: url, Model: "m", Dim: 4, Attempts: 2, RetryMin: time.Millisecond}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Embed(context.Background(), []string{"x"})
	if project.KindOf(err) != project.Transient {
		t.Errorf("kind = %s (%v), want transient", project.KindOf(err), err)
	}
	if err == nil || strings.Contains(err.Error(), "query-secret") {
		t.Errorf("error = %v, want an error without the URL's query", err)
	}
}

func TestHTTPProbe(t *testing.T) {
	tests := []struct {
		name     string
		fail     func(http.ResponseWriter, int, []string) bool
		dim      int
		kind     project.ErrorKind
		contains string
	}{
		{"answers", nil, 8, 0, ""},
		{"wrong dimension", nil, 12, project.Fatal, "returned vectors of dimension 8, but the configured dimension is 12: set --embed-dim (or --vector-dim) to 8"},
		{"refuses the probe", status(400, `{"error":"model required"}`), 8, project.Fatal, "probe: "},
		{"down", status(503, ``), 8, project.Transient, "503"},
		{"rate-limited at start", status(429, `{"error":"slow down"}`), 8, project.Transient, "429"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint(t, 8, tt.fail)
			h := e.embedder(t, HTTPConfig{Dim: tt.dim, Attempts: 1})
			err := h.Probe(context.Background())
			if tt.contains == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := e.inputs()[0]; !slices.Equal(got, []string{ProbeText}) {
					t.Errorf("probe input = %q, want %q", got, ProbeText)
				}
				return
			}
			if err == nil || project.KindOf(err) != tt.kind || !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("Probe = %v (kind %s), want kind %s containing %q", err, project.KindOf(err), tt.kind, tt.contains)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 12 ", 12 * time.Second, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"99999999999999999999", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}
