package index

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/testenv"
	"github.com/projector/projector/internal/testtls"
)

// TestTLSAndAPIKey runs the adapter against the two real Qdrant servers of
// scripts/services.sh: the one that requires an API key over TLS, and the
// plain one.
func TestTLSAndAPIKey(t *testing.T) {
	secure := testenv.Env(t, "Qdrant with an API key", "PROJECTOR_SECURE_QDRANT_ADDR")
	keyFile := testenv.Env(t, "Qdrant with an API key", "PROJECTOR_SECURE_QDRANT_API_KEY_FILE")
	caFile := testenv.Env(t, "the services' CA", "PROJECTOR_SECURE_CA_FILE")
	plain := testenv.QdrantAddr(t)
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	apiKey := strings.TrimSpace(string(b))
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	ctx := context.Background()
	collection := fmt.Sprintf("tls_test_%d", time.Now().UnixNano())

	trusted := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	stranger := &tls.Config{RootCAs: testtls.NewCA(t, "another CA").Pool(), MinVersion: tls.VersionTLS12}
	tests := []struct {
		name     string
		addr     string
		key      string
		tls      *tls.Config
		wantKind project.ErrorKind // when wantErr is set
		wantErr  string
	}{
		{name: "trusted CA and the key", addr: secure, key: apiKey, tls: trusted},
		{name: "wrong key", addr: secure, key: "wrong-key-7c2a", tls: trusted, wantKind: project.Fatal, wantErr: "Invalid API key"},
		{name: "no key", addr: secure, tls: trusted, wantKind: project.Fatal, wantErr: "Must provide an API key"},
		{name: "certificate of an unknown CA", addr: secure, key: apiKey, tls: stranger, wantKind: project.Fatal, wantErr: "x509: certificate signed by unknown authority"},
		{name: "TLS to a plain server", addr: plain, key: apiKey, tls: trusted, wantKind: project.Fatal, wantErr: "first record does not look like a TLS handshake"},
		{name: "plain to a TLS server", addr: secure, key: apiKey, wantKind: project.Transient, wantErr: "Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(Config{Addr: tt.addr, Collection: collection, Dim: 4, APIKey: tt.key, TLS: tt.tls})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			defer func() { _ = s.Client().DeleteCollection(ctx, collection) }()
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
