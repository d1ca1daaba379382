package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready:\nconsumer: not yet joined group projector\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	tests := []struct {
		path     string
		wantCode int
		wantOut  string
	}{
		{"/healthz", 0, "ok"},
		{"/readyz", 1, "not yet joined"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"probe", "--url", srv.URL + tt.path}, nil, &stdout, &stderr, func(string) string { return "" })
		if code != tt.wantCode {
			t.Errorf("probe %s: exit %d, want %d (stderr %q)", tt.path, code, tt.wantCode, stderr.String())
		}
		if !strings.Contains(stdout.String()+stderr.String(), tt.wantOut) {
			t.Errorf("probe %s: output %q, want it to contain %q", tt.path, stdout.String()+stderr.String(), tt.wantOut)
		}
	}
}
