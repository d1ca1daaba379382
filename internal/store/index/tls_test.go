package index

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/qdrantdouble"
	"github.com/projector/projector/internal/testtls"
)

// apiKey is distinctive, so a test can tell it never reached an error.
const apiKey = "qdrant-test-key-6b1f0e2d"

func TestTLSAndAPIKey(t *testing.T) {
	ca := testtls.NewCA(t, "qdrant test CA")
	server := ca.Server("127.0.0.1", "localhost")
	ctx := context.Background()
	secure, err := qdrantdouble.New(qdrantdouble.Options{
		APIKey: apiKey, TLS: &tls.Config{Certificates: []tls.Certificate{server.TLS}, MinVersion: tls.VersionTLS12},
	}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secure.Close() })
	plain, err := qdrantdouble.New(qdrantdouble.Options{}).Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })

	trusted := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	stranger := &tls.Config{RootCAs: testtls.NewCA(t, "another CA").Pool(), MinVersion: tls.VersionTLS12}
	tests := []struct {
		name     string
		addr     string
		key      string
		tls      *tls.Config
		wantKind project.ErrorKind // when wantErr is set
		wantErr  string
	}{
		{name: "trusted CA and the key", addr: secure.Addr(), key: apiKey, tls: trusted},
		{name: "wrong key", addr: secure.Addr(), key: "wrong-key-7c2a", tls: trusted, wantKind: project.Fatal, wantErr: "Invalid API key"},
		{name: "no key", addr: secure.Addr(), tls: trusted, wantKind: project.Fatal, wantErr: "Must provide an API key"},
		{name: "certificate of an unknown CA", addr: secure.Addr(), key: apiKey, tls: stranger, wantKind: project.Fatal, wantErr: "x509: certificate signed by unknown authority"},
		{name: "TLS to a plain server", addr: plain.Addr(), key: apiKey, tls: trusted, wantKind: project.Fatal, wantErr: "first record does not look like a TLS handshake"},
		{name: "plain to a TLS server", addr: secure.Addr(), key: apiKey, wantKind: project.Transient, wantErr: "Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(Config{Addr: tt.addr, Collection: "tls_test", Dim: 4, APIKey: tt.key, TLS: tt.tls})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = s.Migrate(mctx)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Migrate: %v, want an error containing %q", err, tt.wantErr)
			}
			if got := project.KindOf(err); got != tt.wantKind {
				t.Errorf("kind %s, want %s (%v)", got, tt.wantKind, err)
			}
			if strings.Contains(err.Error(), apiKey) || (tt.key != "" && strings.Contains(err.Error(), tt.key)) {
				t.Errorf("error %q contains the API key", err)
			}
		})
	}
}
