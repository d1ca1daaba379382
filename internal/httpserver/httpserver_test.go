package httpserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/health"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve runs a Server with cfg on a free loopback port until the test
// ends, and returns its base URL and a client.
func serve(t *testing.T, cfg Config, status *health.Status) (string, *http.Client) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "projector_test_total", Help: "A test counter."}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := New(cfg, zap.NewNop(), reg, status)
	go func() { done <- srv.Serve(ctx, ln) }()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), client
}

func get(t *testing.T, client *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestServesOnlyItsEndpoints(t *testing.T) {
	// The package imports net/http/pprof, whose init registers the profiles
	// on http.DefaultServeMux: a server that used the default mux would
	// serve them below.
	tests := []struct {
		name     string
		pprof    bool
		method   string
		path     string
		wantCode int
		wantBody string
	}{
		{name: "metrics", path: "/metrics", wantCode: 200, wantBody: "projector_test_total 0"},
		{name: "healthz", path: "/healthz", wantCode: 200, wantBody: "ok"},
		{name: "readyz", path: "/readyz", wantCode: 200, wantBody: "ready"},
		{name: "livez", path: "/livez", wantCode: 200, wantBody: "live"},
		{name: "root", path: "/", wantCode: 404},
		{name: "unknown path", path: "/admin", wantCode: 404},
		{name: "below metrics", path: "/metrics/x", wantCode: 404},
		{name: "expvar", path: "/debug/vars", wantCode: 404},
		{name: "pprof off", path: "/debug/pprof/", wantCode: 404},
		{name: "pprof profile off", path: "/debug/pprof/profile?seconds=1", wantCode: 404},
		{name: "pprof goroutines off", path: "/debug/pprof/goroutine", wantCode: 404},
		{name: "pprof on", pprof: true, path: "/debug/pprof/", wantCode: 200, wantBody: "goroutine"},
		{name: "pprof heap on", pprof: true, path: "/debug/pprof/heap?debug=1", wantCode: 200, wantBody: "heap profile"},
		{name: "pprof on, other paths still absent", pprof: true, path: "/debug/vars", wantCode: 404},
		{name: "POST metrics", method: http.MethodPost, path: "/metrics", wantCode: 405},
		{name: "DELETE readyz", method: http.MethodDelete, path: "/readyz", wantCode: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, client := serve(t, Config{Pprof: tt.pprof}, health.New())
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			code, body := get(t, client, method, base+tt.path)
			if code != tt.wantCode {
				t.Fatalf("%s %s: status %d, want %d (body %.200q)", method, tt.path, code, tt.wantCode, body)
			}
			if !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s: body %.200q, want it to contain %q", method, tt.path, body, tt.wantBody)
			}
		})
	}
}

// TestLivezFollowsTheLivenessCheck: a problem makes the process not ready
// but still live; only the liveness check, once set, fails /livez.
func TestLivezFollowsTheLivenessCheck(t *testing.T) {
	status := health.New()
	base, client := serve(t, Config{}, status)
	status.Fail("index", "does not answer")
	if code, _ := get(t, client, http.MethodGet, base+"/livez"); code != 200 {
		t.Errorf("livez with a store down: %d, want 200: a restart cures no outage", code)
	}
	wedged := errors.New("the poll loop has waited 6m0s for records while documents/0 lags 12 records")
	status.SetLiveness(func() error { return wedged })
	code, body := get(t, client, http.MethodGet, base+"/livez")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "documents/0 lags 12 records") {
		t.Errorf("livez when wedged: %d %q, want 503 with the reason", code, body)
	}
}

func TestReadyzListsProblems(t *testing.T) {
	status := health.New()
	base, client := serve(t, Config{}, status)
	if code, body := get(t, client, http.MethodGet, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("readyz with no problem: %d %q, want 200 %q", code, body, "ready\n")
	}
	status.Fail("graph ping", "does not answer: connection refused")
	status.Fail("consumer", "not in the group yet")
	code, body := get(t, client, http.MethodGet, base+"/readyz")
	want := "not ready:\nconsumer: not in the group yet\ngraph ping: does not answer: connection refused\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("readyz with problems: %d %q, want 503 %q", code, body, want)
	}
	status.Recover("graph ping")
	status.Recover("consumer")
	if code, _ := get(t, client, http.MethodGet, base+"/readyz"); code != 200 {
		t.Fatalf("readyz after recovery: %d, want 200", code)
	}
}

func TestTimeouts(t *testing.T) {
	// A client that sends its headers slowly, or never reads the answer,
	// must not hold a connection and a goroutine forever.
	s := New(Config{}, zap.NewNop(), prometheus.NewRegistry(), health.New())
	tests := []struct {
		name string
		got  time.Duration
		max  time.Duration
	}{
		{"ReadHeaderTimeout", s.srv.ReadHeaderTimeout, 10 * time.Second},
		{"ReadTimeout", s.srv.ReadTimeout, time.Minute},
		{"WriteTimeout", s.srv.WriteTimeout, time.Minute},
		{"IdleTimeout", s.srv.IdleTimeout, 2 * time.Minute},
	}
	for _, tt := range tests {
		if tt.got <= 0 || tt.got > tt.max {
			t.Errorf("%s is %s, want 0 < it <= %s", tt.name, tt.got, tt.max)
		}
	}
	// pprof's CPU profile runs for ?seconds=N; the write timeout must leave
	// room for the default 30 s, or --pprof profiles are cut off.
	if s.srv.WriteTimeout < 30*time.Second {
		t.Errorf("WriteTimeout %s is shorter than a default CPU profile (30s)", s.srv.WriteTimeout)
	}
}

func TestSlowHeadersAreCut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the read header timeout")
	}
	base, _ := serve(t, Config{}, health.New())
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Half a request line, then nothing: the server must hang up.
	if _, err := conn.Write([]byte("GET /metrics HT")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read: %v, want the server to close the connection", err)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Fatalf("the server held a silent connection for %s", waited)
	}
}
