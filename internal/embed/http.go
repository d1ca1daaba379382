package embed

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/retry"
)

// StoreName labels the embedder's failures (project.StoreError.Store), so
// the projector's metrics and logs name it like a store.
const StoreName = "embedder"

// ProbeText is the text the start-up probe embeds. It is fixed so a test
// server can tell the probe from the projection's own requests.
const ProbeText = "projector embedding probe"

// HTTPConfig configures an HTTP embedder. Zero values take the defaults
// named on each field.
type HTTPConfig struct {
	// URL is the endpoint: see EndpointURL for how the embeddings route is
	// derived from it.
	URL string
	// Model is sent with every request and keys the embedding cache.
	Model string
	// Dim is the length of every vector; a response with another length
	// is a Fatal error.
	Dim int
	// APIKey, when set, is sent as "Authorization: Bearer <key>". It never
	// appears in an error, a log line or a metric.
	APIKey string
	// Timeout bounds one request, reading the response included
	// (default 30 s). A request that times out is retried.
	Timeout time.Duration
	// Batch is the number of texts per request (default 32, the default
	// --max-client-batch-size of text-embeddings-inference).
	Batch int
	// Concurrency bounds the requests in flight at once, over all callers
	// (default 2).
	Concurrency int
	// Attempts is how often one request is tried on 429, 408, 5xx, a
	// timeout or a network error before Embed returns a Transient error
	// (default 4). The projector then retries the batch with its own
	// backoff and reports the embedder not ready meanwhile.
	Attempts int
	// RetryMin and RetryMax bound the capped exponential backoff between
	// attempts (defaults 250 ms and 5 s); half of each wait is random.
	RetryMin, RetryMax time.Duration
	// MaxRetryAfter caps the wait a Retry-After header asks for
	// (default 30 s).
	MaxRetryAfter time.Duration
	// Client sends the requests. Nil: a client that does not follow
	// redirects, so the API key is only ever sent to URL's host.
	Client *http.Client
}

func (c *HTTPConfig) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 32
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.Attempts <= 0 {
		c.Attempts = 4
	}
	if c.RetryMin <= 0 {
		c.RetryMin = 250 * time.Millisecond
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(5*time.Second, c.RetryMin)
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = 30 * time.Second
	}
	if c.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = c.Concurrency
		c.Client = &http.Client{
			Transport:     t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
}

// HTTP embeds texts with an OpenAI-compatible embeddings endpoint (OpenAI,
// text-embeddings-inference, Ollama, vLLM, LocalAI...): it posts
// {"model", "input": [texts]} and reads {"data": [{"index", "embedding"}]}.
// It is safe for concurrent use.
//
// Failures come back as *project.StoreError with Store "embedder"; the
// kind tells the projector what to do (docs/embeddings.md has the table):
// Rejected when the endpoint refuses this input (the record is
// dead-lettered), Fatal when the configuration is wrong or the endpoint
// does not behave as configured (nothing is committed until it is fixed),
// Transient when retries did not get through.
type HTTP struct {
	cfg      HTTPConfig
	endpoint string // the URL requests go to
	display  string // endpoint without user info and query, for messages
	sem      chan struct{}
	m        *httpMetrics
}

// NewHTTP returns an HTTP embedder; its metrics are registered on reg.
func NewHTTP(cfg HTTPConfig, reg prometheus.Registerer) (*HTTP, error) {
	cfg.defaults()
	if cfg.Dim <= 0 {
		return nil, errors.New("embedding dimension must be > 0")
	}
	if cfg.Model == "" {
		return nil, errors.New("embedding model is empty")
	}
	endpoint, err := EndpointURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	display := *endpoint
	display.User, display.RawQuery, display.Fragment = nil, "", ""
	return &HTTP{
		cfg: cfg, endpoint: endpoint.String(), display: display.String(),
		sem: make(chan struct{}, cfg.Concurrency), m: newHTTPMetrics(reg),
	}, nil
}

// EndpointURL derives the URL requests are posted to from a configured
// base URL: a URL whose path ends in /embeddings is used as it is; one
// ending in /v1 gets /embeddings; any other gets /v1/embeddings. So
// "http://tei:80", "https://api.openai.com/v1" and
// "http://ollama:11434/v1/embeddings" all work. The query is kept.
func EndpointURL(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// url.Parse errors quote the URL, which may hold credentials.
		return nil, errors.New("embedding URL: want an absolute http:// or https:// URL")
	}
	path := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(path, "/embeddings"):
	case strings.HasSuffix(path, "/v1"):
		path += "/embeddings"
	default:
		path += "/v1/embeddings"
	}
	u.Path, u.RawPath = path, ""
	return u, nil
}

// Dim returns the length of every vector.
func (h *HTTP) Dim() int { return h.cfg.Dim }

// Endpoint is the URL requests go to, without credentials or query, for
// logs.
func (h *HTTP) Endpoint() string { return h.display }

// Embed returns one vector per text, in order. Texts are sent in requests
// of at most Batch texts, at most Concurrency at once.
func (h *HTTP) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(h.cfg.Concurrency)
	for start := 0; start < len(texts); start += h.cfg.Batch {
		end := min(start+h.cfg.Batch, len(texts))
		g.Go(func() error { return h.embedSplit(gctx, texts[start:end], out[start:end]) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Probe embeds ProbeText once to check, before the service starts, that
// the endpoint answers with vectors of the configured dimension. Every
// error it returns is Fatal except a Transient one (the endpoint may still
// be starting, or be rate-limiting a busy start: worth waiting for).
func (h *HTTP) Probe(ctx context.Context) error {
	err := h.post(ctx, []string{ProbeText}, make([][]float32, 1))
	if se, ok := err.(*statusError); ok {
		return h.fail(project.Fatal, fmt.Errorf("probe: %w", h.explain(se)))
	}
	if project.KindOf(err) == project.Limit {
		return h.fail(project.Transient, err)
	}
	return err
}

// embedSplit embeds texts into dst. A request too large for the endpoint
// (413) is split in halves until it fits; a single text that is still too
// large, or that the endpoint refuses (400, 422), is this input's fault
// only if the endpoint still embeds the probe text, so a configuration
// that breaks every request can never dead-letter the whole topic.
func (h *HTTP) embedSplit(ctx context.Context, texts []string, dst [][]float32) error {
	err := h.post(ctx, texts, dst)
	se, ok := err.(*statusError)
	if !ok {
		return err
	}
	switch se.code {
	case http.StatusRequestEntityTooLarge:
		if len(texts) > 1 {
			half := len(texts) / 2
			if err := h.embedSplit(ctx, texts[:half], dst[:half]); err != nil {
				return err
			}
			return h.embedSplit(ctx, texts[half:], dst[half:])
		}
		fallthrough
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		if perr := h.Probe(ctx); perr != nil {
			if project.KindOf(perr) == project.Transient {
				return perr
			}
			return h.fail(project.Fatal, fmt.Errorf("%w; the endpoint refuses the probe text too, so the configuration is at fault, not the input", h.explain(se)))
		}
		return h.fail(project.Rejected, fmt.Errorf("the endpoint refuses this input: %w", se))
	}
	return h.fail(project.Fatal, h.explain(se))
}

// explain adds to a status error what the operator can do about it.
func (h *HTTP) explain(se *statusError) error {
	switch se.code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w (check the key in PROJECTOR_EMBED_API_KEY or --embed-api-key-file)", se)
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return fmt.Errorf("%w (check --embed-url: requests go to %s; and --embed-model %q)", se, h.display, h.cfg.Model)
	case http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w (lower --embed-batch or raise the endpoint's request limits)", se)
	}
	if se.code >= 300 && se.code < 400 {
		return fmt.Errorf("%w (the endpoint redirects; set --embed-url to the final URL)", se)
	}
	return se
}

// post sends one request for texts and fills dst, retrying what may pass
// on a later attempt. It returns a bare *statusError for a status that is
// not retried, for its caller to classify, and a *project.StoreError for
// everything else (a retried status that never passed is wrapped in a
// Transient one).
func (h *HTTP) post(ctx context.Context, texts []string, dst [][]float32) error {
	body, err := json.Marshal(request{Model: h.cfg.Model, Input: texts})
	if err != nil {
		return h.fail(project.Fatal, fmt.Errorf("encode request: %w", err))
	}
	for attempt := 1; ; attempt++ {
		err := h.attempt(ctx, body, dst)
		var re *retryError
		if !errors.As(err, &re) {
			return err
		}
		if ctx.Err() != nil {
			return h.fail(project.Transient, fmt.Errorf("%s: %w", h.display, ctx.Err()))
		}
		if attempt >= h.cfg.Attempts {
			err := fmt.Errorf("%w (gave up after %d attempts)", re.err, attempt)
			if limit := rateLimit(re.err); limit != "" {
				// Still 429 after every attempt: the endpoint's rate
				// limit or quota, not an outage, and no record's fault.
				return &project.StoreError{Store: StoreName, Kind: project.Limit, LimitName: limit, Err: err}
			}
			return h.fail(project.Transient, err)
		}
		wait := retry.Policy{Min: h.cfg.RetryMin, Max: h.cfg.RetryMax}.Delay(attempt - 1)
		if re.hasRetryAfter {
			wait = min(re.retryAfter, h.cfg.MaxRetryAfter)
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return h.fail(project.Transient, fmt.Errorf("%s: %w", h.display, err))
		}
	}
}

// attempt makes one request. It holds a slot of the concurrency limit only
// while the request is in flight, not while it waits to retry.
func (h *HTTP) attempt(ctx context.Context, body []byte, dst [][]float32) error {
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return &retryError{err: ctx.Err()}
	}
	defer func() { <-h.sem }()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.endpoint, bytes.NewReader(body))
	if err != nil {
		return h.fail(project.Fatal, fmt.Errorf("build request for %s: %w", h.display, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "projector")
	if h.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.cfg.APIKey)
	}
	start := time.Now()
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		h.m.observe(start, outcomeOf(ctx))
		// *url.Error repeats the URL, query included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		err = fmt.Errorf("post %s: %w", h.display, err)
		var cert *tls.CertificateVerificationError
		if errors.As(err, &cert) {
			return h.fail(project.Fatal, fmt.Errorf("%w (check the endpoint's certificate, or the system's CA certificates)", err))
		}
		return &retryError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		h.m.observe(start, strconv.Itoa(resp.StatusCode))
		se := &statusError{code: resp.StatusCode, endpoint: h.display, msg: h.errorMessage(resp.Body)}
		if retryable(resp.StatusCode) {
			re := &retryError{err: se}
			re.retryAfter, re.hasRetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			return re
		}
		return se
	}
	err = h.decode(resp.Body, dst)
	if errors.Is(err, errRead) {
		h.m.observe(start, outcomeOf(ctx))
		return &retryError{err: err}
	}
	h.m.observe(start, strconv.Itoa(resp.StatusCode))
	return err
}

// errRead marks a response whose body could not be read to its end (a
// timeout or a dropped connection), which is retried.
var errRead = errors.New("read response")

// decode reads a successful response into dst. Its size is bounded by what
// a valid answer can need, so a misbehaving endpoint cannot exhaust memory.
func (h *HTTP) decode(body io.Reader, dst [][]float32) error {
	// A float in JSON takes at most ~16 bytes; allow twice that plus room
	// for the envelope and the usage fields.
	limit := int64(64<<10) + int64(len(dst))*int64(h.cfg.Dim)*32
	raw, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return fmt.Errorf("%w from %s: %w", errRead, h.display, err)
	}
	if int64(len(raw)) > limit {
		return h.fail(project.Fatal, fmt.Errorf("response of %s is larger than %d bytes, more than %d vectors of dimension %d can take", h.display, limit, len(dst), h.cfg.Dim))
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		return h.fail(project.Fatal, fmt.Errorf("response of %s is not an embeddings response: %w", h.display, err))
	}
	if len(r.Data) != len(dst) {
		return h.fail(project.Fatal, fmt.Errorf("%s returned %d vectors for %d texts", h.display, len(r.Data), len(dst)))
	}
	// data may come back in any order: place each vector by its index.
	seen := make([]bool, len(dst))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(dst) || seen[d.Index] {
			return h.fail(project.Fatal, fmt.Errorf("%s returned vector index %d, want each of 0..%d once", h.display, d.Index, len(dst)-1))
		}
		if len(d.Embedding) != h.cfg.Dim {
			return h.fail(project.Fatal, fmt.Errorf(
				"%s returned vectors of dimension %d, but the configured dimension is %d: set --embed-dim (or --vector-dim) to %d and use a Qdrant collection of that size (--qdrant-collection), or choose a model of dimension %d",
				h.display, len(d.Embedding), h.cfg.Dim, len(d.Embedding), h.cfg.Dim))
		}
		seen[d.Index] = true
	}
	for _, d := range r.Data {
		dst[d.Index] = d.Embedding
	}
	return nil
}

// errorMessage reads the message of an error response: the "error" or
// "message" field of the JSON shapes that OpenAI, text-embeddings-inference
// and Ollama use, else the start of the body. The API key is scrubbed, in
// case an endpoint echoes it.
func (h *HTTP) errorMessage(body io.Reader) string {
	raw, _ := io.ReadAll(io.LimitReader(body, 8<<10))
	msg := string(raw)
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(raw, &shaped) == nil {
		var s string
		var nested struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(shaped.Error, &s) == nil && s != "":
			msg = s
		case json.Unmarshal(shaped.Error, &nested) == nil && nested.Message != "":
			msg = nested.Message
		case shaped.Message != "":
			msg = shaped.Message
		}
	}
	if h.cfg.APIKey != "" {
		msg = strings.ReplaceAll(msg, h.cfg.APIKey, "[redacted]")
	}
	msg = strings.Join(strings.FieldsFunc(msg, unicode.IsSpace), " ")
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "..."
	}
	return msg
}

// rateLimit names the limit of a 429 answer: the account's quota when the
// endpoint says so (OpenAI's insufficient_quota), else its rate limit; ""
// for any other error.
func rateLimit(err error) string {
	se, ok := errors.AsType[*statusError](err)
	switch {
	case !ok || se.code != http.StatusTooManyRequests:
		return ""
	case strings.Contains(se.msg, "quota"):
		return "quota"
	}
	return "rate_limit"
}

func (h *HTTP) fail(kind project.ErrorKind, err error) error {
	return &project.StoreError{Store: StoreName, Kind: kind, Err: err}
}

// retryable reports whether a status may pass on a later attempt.
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout ||
		(code >= 500 && code != http.StatusNotImplemented && code != http.StatusHTTPVersionNotSupported)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date (RFC 9110, 10.2.3). A date in the past means no wait.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 1<<31)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

func outcomeOf(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timeout"
	}
	return "error"
}

type request struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
}

type response struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

// statusError is a response with a status that is not retried, or the
// last of a retried one.
type statusError struct {
	code     int
	endpoint string
	msg      string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("%s answered %d %s", e.endpoint, e.code, http.StatusText(e.code))
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

// retryError is a failure that may pass on a later attempt.
type retryError struct {
	err           error
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// httpMetrics are the HTTP embedder's series.
type httpMetrics struct {
	requests *prometheus.CounterVec
	seconds  prometheus.Histogram
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_embed_requests_total",
			Help: "Requests to the embedding endpoint, by result: the HTTP status code, timeout or error (network).",
		}, []string{"code"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_embed_request_seconds",
			Help:    "Time of one request to the embedding endpoint, whatever its result.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	reg.MustRegister(m.requests, m.seconds)
	return m
}

func (m *httpMetrics) observe(start time.Time, code string) {
	m.requests.WithLabelValues(code).Inc()
	m.seconds.Observe(time.Since(start).Seconds())
}
