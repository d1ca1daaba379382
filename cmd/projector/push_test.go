package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/retry"
)

// TestPushReconcileResult pushes a reconcile summary as the CronJob does
// and reads what a Pushgateway would have received.
func TestPushReconcileResult(t *testing.T) {
	var method, path, body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		method, path, body = r.Method, r.URL.Path, string(b)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	sum := &reconcile.Summary{Documents: 7, Started: time.Unix(1700000000, 0), Duration: time.Second,
		Found: map[string]map[reconcile.Class]int64{"index": {reconcile.Missing: 2}}}
	p := pushFlags{url: srv.URL, job: "projector_reconcile", tries: 2, backoff: retry.Policy{Min: time.Millisecond, Max: time.Millisecond}}
	if err := p.push(context.Background(), sum.Registry([]string{"index"})); err != nil {
		t.Fatal(err)
	}
	if method != http.MethodPut || path != "/metrics/job/projector_reconcile" {
		t.Errorf("request %s %s, want PUT /metrics/job/projector_reconcile (replacing the last run's)", method, path)
	}
	for _, want := range []string{"projector_reconcile_documents", "projector_reconcile_discrepancies", "projector_reconcile_last_run_timestamp_seconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("pushed body lacks %s", want)
		}
	}

	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	var exit *exitError
	if err := p.push(context.Background(), sum.Registry([]string{"index"})); !errors.As(err, &exit) || exit.code != exitPushFailed || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("push to a failing gateway: %v, want exit status %d and an error naming it", err, exitPushFailed)
	}
}

// Issue 28: a Pushgateway that failed once made the CronJob run the whole
// reconcile again. Now a push is tried again, in the same run, and one
// that succeeds on a later try loses nothing.
func TestPushRetriesAFailingGateway(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := pushFlags{url: srv.URL, job: "projector_reconcile", tries: 4, backoff: retry.Policy{Min: time.Millisecond, Max: 5 * time.Millisecond}}
	if err := p.push(context.Background(), pruneMetrics(1, 2, time.Now())); err != nil {
		t.Fatalf("push to a gateway that fails twice: %v, want it pushed on the third try", err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("%d pushes, want 3", got)
	}
}
