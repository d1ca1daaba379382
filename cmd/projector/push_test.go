package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/reconcile"
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
	p := pushFlags{url: srv.URL, job: "projector_reconcile"}
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
	if err := p.push(context.Background(), sum.Registry([]string{"index"})); err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("push to a failing gateway: %v, want an error naming it", err)
	}
}
