package postgres

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/testenv"
	"github.com/projector/projector/internal/testtls"
)

// secureDSN returns the DSN of the TLS-only role of scripts/services.sh
// (its password in a passfile) and that password.
func secureDSN(t *testing.T) (*url.URL, string) {
	t.Helper()
	dsn := testenv.Env(t, "PostgreSQL with TLS", "PROJECTOR_SECURE_POSTGRES_DSN")
	pwFile := testenv.Env(t, "PostgreSQL with TLS", "PROJECTOR_SECURE_POSTGRES_PASSWORD_FILE")
	b, err := os.ReadFile(pwFile)
	if err != nil {
		testenv.Missing(t, "PostgreSQL with TLS", err.Error())
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("PROJECTOR_SECURE_POSTGRES_DSN: %v", err)
	}
	return u, strings.TrimSpace(string(b))
}

// with returns u with the query parameters changed: an empty value
// removes one.
func with(u *url.URL, params ...string) *url.URL {
	out := *u
	q := out.Query()
	for i := 0; i+1 < len(params); i += 2 {
		if params[i+1] == "" {
			q.Del(params[i])
		} else {
			q.Set(params[i], params[i+1])
		}
	}
	out.RawQuery = q.Encode()
	return &out
}

// TestConnectionSettings checks that the libpq settings the README promises
// work through pgx against the real server: sslmode up to verify-full,
// sslrootcert, passfile and a password in the DSN, and that a connection
// that must not work fails as fatal, with the server named and no password
// in the message.
func TestConnectionSettings(t *testing.T) {
	u, password := secureDSN(t)
	dir := t.TempDir()
	wrongPass := filepath.Join(dir, "wrong.pgpass")
	if err := os.WriteFile(wrongPass, []byte("*:*:*:*:wrong-pg-password-1f3e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	strangerCA := testtls.NewCA(t, "another CA").CertFile
	withPassword := *u
	withPassword.User = url.UserPassword(u.User.Username(), password)
	localhost := *u
	localhost.Host = strings.Replace(u.Host, "127.0.0.1", "localhost", 1)

	tests := []struct {
		name     string
		dsn      string
		wantSSL  bool
		wantKind project.ErrorKind
		wantErr  string // empty: the connection works
	}{
		{name: "verify-full with the CA, password from the passfile", dsn: u.String(), wantSSL: true},
		{name: "verify-full by host name", dsn: localhost.String(), wantSSL: true},
		{name: "verify-ca", dsn: with(u, "sslmode", "verify-ca").String(), wantSSL: true},
		{name: "require, no CA", dsn: with(u, "sslmode", "require", "sslrootcert", "").String(), wantSSL: true},
		{name: "password in the DSN", dsn: with(&withPassword, "passfile", "").String(), wantSSL: true},
		{name: "without TLS the role is refused", dsn: with(u, "sslmode", "disable").String(), wantKind: project.Fatal, wantErr: "no encryption"},
		{name: "verify-full with another CA", dsn: with(u, "sslrootcert", strangerCA).String(), wantKind: project.Fatal, wantErr: "certificate signed by unknown authority"},
		{name: "wrong password in the passfile", dsn: with(u, "passfile", wrongPass).String(), wantKind: project.Fatal, wantErr: "password authentication failed"},
		{name: "no password at all", dsn: with(u, "passfile", filepath.Join(dir, "absent")).String(), wantKind: project.Fatal, wantErr: "password authentication failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			schema := fmt.Sprintf("tls_test_%d", time.Now().UnixNano())
			s, err := Open(ctx, tt.dsn, schema)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Migrate(ctx)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Migrate: %v, want an error containing %q", err, tt.wantErr)
				}
				if got := project.KindOf(err); got != tt.wantKind {
					t.Errorf("kind %s, want %s (%v)", got, tt.wantKind, err)
				}
				if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "wrong-pg-password") {
					t.Errorf("error %q contains a password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			defer func() {
				_, _ = s.pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			}()
			var ssl bool
			if err := s.pool.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil {
				t.Fatal(err)
			}
			if ssl != tt.wantSSL {
				t.Errorf("connection encrypted: %v, want %v", ssl, tt.wantSSL)
			}
		})
	}
}

// TestParseErrorHidesPassword checks that a DSN that does not parse is not
// echoed: pgx's own parse errors quote the connection string.
func TestParseErrorHidesPassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://u:hidden-pw-93ac@127.0.0.1:5432/db?sslmode=bogus", "s")
	if err == nil || strings.Contains(err.Error(), "hidden-pw-93ac") {
		t.Fatalf("Open: %v, want an error without the password", err)
	}
}

// TestConnectTimeout checks that a server which accepts and never answers
// is reported as a transient failure, not waited on for ever (libpq's
// default), and that the DSN's connect_timeout is kept when it has one.
func TestConnectTimeout(t *testing.T) {
	dsn := "postgres://projector@" + testenv.SilentListener(t) + "/projector?sslmode=disable"

	s, err := Open(context.Background(), dsn, "s")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.pool.Config().ConnConfig.ConnectTimeout; got != defaultConnectTimeout {
		t.Errorf("connect timeout without connect_timeout in the DSN: %v, want %v", got, defaultConnectTimeout)
	}
	s.Close()

	s, err = Open(context.Background(), dsn+"&connect_timeout=1", "s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.pool.Config().ConnConfig.ConnectTimeout; got != time.Second {
		t.Errorf("connect timeout with connect_timeout=1: %v, want 1s", got)
	}
	err = s.Ping(context.Background())
	if err == nil || project.KindOf(err) != project.Transient {
		t.Fatalf("Ping of a server that never answers: %v, want a transient error", err)
	}
}
