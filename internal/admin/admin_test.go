package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/consume"
)

type fakePartitions struct{ resumed []string }

func (f *fakePartitions) Partitions() []consume.PartitionState {
	return []consume.PartitionState{{Topic: "documents", Partition: 0, State: "halted"}}
}

func (f *fakePartitions) Resume(_ context.Context, topic string, partition int32) error {
	switch {
	case partition == 7:
		return consume.ErrNotAssigned
	case partition == 1:
		return consume.ErrNotHalted
	}
	f.resumed = append(f.resumed, topic)
	return nil
}

func TestEndpoint(t *testing.T) {
	f := &fakePartitions{}
	srv := httptest.NewServer(New(Config{Token: "s3cret"}, zap.NewNop(), f).srv.Handler)
	defer srv.Close()
	tests := []struct {
		name, method, path, token string
		want                      int
	}{
		{"list", http.MethodGet, "/partitions", "s3cret", http.StatusOK},
		{"no token", http.MethodGet, "/partitions", "", http.StatusUnauthorized},
		{"wrong token", http.MethodPost, "/partitions/documents/0/resume", "s3cre", http.StatusUnauthorized},
		{"resume", http.MethodPost, "/partitions/documents/0/resume", "s3cret", http.StatusOK},
		{"not halted", http.MethodPost, "/partitions/documents/1/resume", "s3cret", http.StatusConflict},
		{"not assigned", http.MethodPost, "/partitions/documents/7/resume", "s3cret", http.StatusNotFound},
		{"bad partition", http.MethodPost, "/partitions/documents/x/resume", "s3cret", http.StatusBadRequest},
		{"resume by GET", http.MethodGet, "/partitions/documents/0/resume", "s3cret", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
			}
		})
	}
	if len(f.resumed) != 1 {
		t.Errorf("resumed %v, want documents once", f.resumed)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8081": true, "localhost:8081": true, "[::1]:8081": true,
		"0.0.0.0:8081": false, ":8081": false, "10.0.0.5:8081": false, "nonsense": false} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
