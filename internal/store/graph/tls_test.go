package graph

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/testenv"
	"github.com/projector/projector/internal/testtls"
)

// secureNeo4j returns the URI, user, password and CA of the Neo4j of
// scripts/services.sh that has authentication on and Bolt over TLS only.
func secureNeo4j(t *testing.T) (uri, user, password string, roots *x509.CertPool) {
	t.Helper()
	const service = "Neo4j with authentication and TLS"
	uri = testenv.Env(t, service, "PROJECTOR_SECURE_NEO4J_URI")
	user = testenv.Env(t, service, "PROJECTOR_SECURE_NEO4J_USER")
	pw, err := os.ReadFile(testenv.Env(t, service, "PROJECTOR_SECURE_NEO4J_PASSWORD_FILE"))
	if err != nil {
		testenv.Missing(t, service, err.Error())
	}
	ca, err := os.ReadFile(testenv.Env(t, service, "PROJECTOR_SECURE_CA_FILE"))
	if err != nil {
		testenv.Missing(t, service, err.Error())
	}
	roots = x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("PROJECTOR_SECURE_CA_FILE holds no certificate")
	}
	return uri, user, strings.TrimSpace(string(pw)), roots
}

// TestAuthenticationAndTLS runs Migrate, the first call of `projector run`,
// against the secured Neo4j: with the right settings it works; with a
// wrong password or a certificate it cannot verify it fails as fatal (so
// the service stops at start), quickly, without the password in the error.
// The wrong password runs last and once: three failures in a row would
// lock the user for five seconds.
func TestAuthenticationAndTLS(t *testing.T) {
	uri, user, password, roots := secureNeo4j(t)
	ssc := strings.Replace(uri, "+s://", "+ssc://", 1)
	trusted := &tls.Config{RootCAs: roots}
	stranger := &tls.Config{RootCAs: testtls.NewCA(t, "another CA").Pool()}
	tests := []struct {
		name     string
		cfg      Config
		wantKind project.ErrorKind
		wantErr  string
	}{
		{name: "bolt+s with the CA", cfg: Config{URI: uri, User: user, Password: password, TLS: trusted}},
		{name: "bolt+ssc, unverified", cfg: Config{URI: ssc, User: user, Password: password}},
		// The driver retries a failed connection for MaxTransactionRetryTime
		// (5 s) before it gives up: one such case is enough.
		{name: "bolt+s with a CA that did not sign it", cfg: Config{URI: uri, User: user, Password: password, TLS: stranger}, wantKind: project.Fatal, wantErr: "certificate signed by unknown authority"},
		{name: "wrong password", cfg: Config{URI: uri, User: user, Password: "wrong-neo4j-password-5d0b", TLS: trusted}, wantKind: project.Fatal, wantErr: "Neo.ClientError.Security.Unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			defer s.Close(ctx)
			start := time.Now()
			err = s.Migrate(ctx)
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
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("failing took %s, want it quick", took)
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), tt.cfg.Password) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

func TestCAFileNeedsAnEncryptedURI(t *testing.T) {
	for _, uri := range []string{"bolt://db:7687", "neo4j://db:7687"} {
		_, err := Open(Config{URI: uri, TLS: &tls.Config{}})
		if err == nil || !strings.Contains(err.Error(), "encrypted scheme") {
			t.Errorf("Open(%s) with a TLS config: %v, want an error asking for an encrypted scheme", uri, err)
		}
	}
	for _, uri := range []string{"bolt+s://db:7687", "neo4j+s://db:7687", "neo4j+ssc://db:7687"} {
		s, err := Open(Config{URI: uri, TLS: &tls.Config{}})
		if err != nil {
			t.Errorf("Open(%s) with a TLS config: %v", uri, err)
			continue
		}
		_ = s.Close(context.Background())
	}
}
