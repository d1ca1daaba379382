package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/config"
	"github.com/projector/projector/internal/testtls"
)

// secretValue is distinctive: no error message may contain it.
const secretValue = "s3cret-Value-that-must-not-leak"

// writeFile writes content to a new file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseFlags registers the Kafka and store flags on a new flag set and
// parses args and env into them as a command would.
func parseFlags(t *testing.T, args []string, env map[string]string) (*kafkaFlags, *storeFlags, error) {
	t.Helper()
	var kf kafkaFlags
	var sf storeFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kf.register(fs)
	sf.register(fs)
	err := parse(fs, args, testEnv(env))
	return &kf, &sf, err
}

// testEnv is a process environment holding only vars.
func testEnv(vars map[string]string) env {
	return env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] }}
}

func TestKafkaSASL(t *testing.T) {
	dir := t.TempDir()
	passwordFile := writeFile(t, dir, "password", secretValue+"\n")
	emptyFile := writeFile(t, dir, "empty", "\n")
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		mechanism string // the mechanism's name, "" for none
		wantErr   string
	}{
		{name: "none"},
		{name: "SCRAM-SHA-512 from a file", args: []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", passwordFile}, mechanism: "SCRAM-SHA-512"},
		{name: "SCRAM-SHA-256 from the environment", args: []string{"--kafka-sasl-mechanism", "scram-sha-256", "--kafka-sasl-user", "u"}, env: map[string]string{"PROJECTOR_KAFKA_SASL_PASSWORD": secretValue}, mechanism: "SCRAM-SHA-256"},
		{name: "PLAIN, all from the environment", env: map[string]string{"PROJECTOR_KAFKA_SASL_MECHANISM": "PLAIN", "PROJECTOR_KAFKA_SASL_USER": "u", "PROJECTOR_KAFKA_SASL_PASSWORD_FILE": passwordFile}, mechanism: "PLAIN"},
		{name: "no user", args: []string{"--kafka-sasl-mechanism", "PLAIN"}, env: map[string]string{"PROJECTOR_KAFKA_SASL_PASSWORD": secretValue}, wantErr: "needs --kafka-sasl-user"},
		{name: "no password", args: []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u"}, wantErr: "set PROJECTOR_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file"},
		{name: "password without mechanism", env: map[string]string{"PROJECTOR_KAFKA_SASL_PASSWORD": secretValue}, wantErr: "--kafka-sasl-mechanism is not"},
		{name: "unknown mechanism", args: []string{"--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u"}, env: map[string]string{"PROJECTOR_KAFKA_SASL_PASSWORD": secretValue}, wantErr: "want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{name: "password twice", args: []string{"--kafka-sasl-password-file", passwordFile}, env: map[string]string{"PROJECTOR_KAFKA_SASL_PASSWORD": secretValue}, wantErr: "both set"},
		{name: "password file missing", args: []string{"--kafka-sasl-password-file", passwordFile + ".gone"}, wantErr: "--kafka-sasl-password-file"},
		{name: "password file empty", args: []string{"--kafka-sasl-password-file", emptyFile}, wantErr: "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kf, _, err := parseFlags(t, tt.args, tt.env)
			if err == nil {
				_, err = kf.opts(zap.NewNop())
			}
			if err == nil && tt.wantErr == "" {
				mech, _ := kf.sasl()
				got := ""
				if mech != nil {
					got = mech.Name()
				}
				if got != tt.mechanism {
					t.Errorf("mechanism %q, want %q", got, tt.mechanism)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), secretValue) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

func TestKafkaPasswordNotInHelp(t *testing.T) {
	var kf kafkaFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	kf.register(fs)
	if err := parse(fs, nil, testEnv(map[string]string{kafkaSASLPasswordEnv: secretValue})); err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Value.String(), secretValue) {
			t.Errorf("flag --%s shows the secret", f.Name)
		}
	})
	if strings.Contains(help.String(), secretValue) {
		t.Errorf("-h shows the secret:\n%s", help.String())
	}
}

func TestSecretsOnTheCommandLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // flags reported as exposed
	}{
		{name: "nothing given"},
		{name: "password from the environment", env: map[string]string{"PROJECTOR_NEO4J_PASSWORD": secretValue}},
		{name: "password on the command line", args: []string{"--neo4j-password", secretValue}, want: []string{"--neo4j-password"}},
		{name: "password on the command line overriding the environment", args: []string{"--neo4j-password", secretValue}, env: map[string]string{"PROJECTOR_NEO4J_PASSWORD": "other"}, want: []string{"--neo4j-password"}},
		{name: "DSN with a password on the command line", args: []string{"--postgres-dsn", "postgres://u:" + secretValue + "@h/db"}, want: []string{"--postgres-dsn"}},
		{name: "DSN without a password on the command line", args: []string{"--postgres-dsn", "postgres://u@h/db?sslmode=verify-full&passfile=/p"}},
		{name: "DSN with a password from the environment", env: map[string]string{"PROJECTOR_POSTGRES_DSN": "postgres://u:" + secretValue + "@h/db"}},
		{name: "both", args: []string{"--neo4j-password=x", "--postgres-dsn", "host=h password=" + secretValue}, want: []string{"--neo4j-password", "--postgres-dsn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, sf, err := parseFlags(t, tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range sf.exposedSecrets() {
				got = append(got, e.flag)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("exposed %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNeo4jPasswordSetTwice(t *testing.T) {
	file := writeFile(t, t.TempDir(), "password", secretValue)
	_, sf, err := parseFlags(t, []string{"--neo4j-password-file", file}, map[string]string{"PROJECTOR_NEO4J_PASSWORD": "other"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sf.open(context.Background())
	if err == nil || !strings.Contains(err.Error(), "set twice") || strings.Contains(err.Error(), secretValue) {
		t.Fatalf("open: %v, want an error saying the password is set twice, without it", err)
	}
}

func TestDSNHasPassword(t *testing.T) {
	tests := []struct {
		dsn  string
		want bool
	}{
		{"postgres://u:p@h/db", true},
		{"postgresql://u:@h/db", true},
		{"postgres://u@h/db?password=p", true},
		{"postgres://u@h/db?sslmode=verify-full&passfile=/x", false},
		{"postgres://h/db", false},
		{"host=h user=u password=p", true},
		{"host=h password = 'p q'", true},
		{"password=p host=h", true},
		{"host=h user=u passfile=/x", false},
		{"host=h user=u sslpassword=x", false},
	}
	for _, tt := range tests {
		if got := dsnHasPassword(tt.dsn); got != tt.want {
			t.Errorf("dsnHasPassword(%q) = %v, want %v", tt.dsn, got, tt.want)
		}
	}
}

func TestClientTLS(t *testing.T) {
	authority := testtls.NewCA(t, "test CA")
	client := authority.Client("projector")
	ca, cert, key := authority.CertFile, client.CertFile, client.KeyFile
	garbage := writeFile(t, t.TempDir(), "garbage", "not a certificate")
	tests := []struct {
		name                string
		ca, cert, key       string
		wantRoots, wantCert bool
		wantErr             string
	}{
		{name: "system roots"},
		{name: "private CA", ca: ca, wantRoots: true},
		{name: "client certificate", ca: ca, cert: cert, key: key, wantRoots: true, wantCert: true},
		{name: "CA file missing", ca: ca + ".gone", wantErr: "--x-tls-ca-file"},
		{name: "CA file not PEM", ca: garbage, wantErr: "holds no PEM certificate"},
		{name: "certificate without key", cert: cert, wantErr: "go together"},
		{name: "key without certificate", key: key, wantErr: "go together"},
		{name: "key is not a key", cert: cert, key: garbage, wantErr: "--x-tls-cert-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := clientTLS("--x-tls", tt.ca, tt.cert, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY") {
					t.Errorf("error %q quotes the key", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.RootCAs != nil; got != tt.wantRoots {
				t.Errorf("private roots %v, want %v", got, tt.wantRoots)
			}
			if got := len(cfg.Certificates) == 1; got != tt.wantCert {
				t.Errorf("client certificate %v, want %v", got, tt.wantCert)
			}
			if cfg.MinVersion < 0x0303 {
				t.Errorf("MinVersion %#x, want at least TLS 1.2", cfg.MinVersion)
			}
		})
	}
}

func TestStoreTLSFlags(t *testing.T) {
	ca := testtls.NewCA(t, "test CA").CertFile
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "plain"},
		{name: "Qdrant over TLS with a private CA", args: []string{"--qdrant-tls-ca-file", ca}},
		{name: "Neo4j over TLS with a private CA", args: []string{"--neo4j-uri", "neo4j+s://db:7687", "--neo4j-tls-ca-file", ca}},
		{name: "Neo4j CA with an unencrypted URI", args: []string{"--neo4j-uri", "bolt://db:7687", "--neo4j-tls-ca-file", ca}, wantErr: "needs an encrypted scheme"},
		{name: "Qdrant CA missing", args: []string{"--qdrant-tls-ca-file", ca + ".gone"}, wantErr: "--qdrant-tls-ca-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, sf, err := parseFlags(t, tt.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			st, err := sf.open(context.Background())
			if err == nil {
				st.close(context.Background())
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("open: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// Every PROJECTOR_* variable and every --flag that docs/security.md names
// must be one `projector run` reads, so an operator who follows it gets
// what it says.
func TestSecurityDocNamesRealSettings(t *testing.T) {
	var f runFlags
	fs := newFlagSet("run", "run", env{stderr: io.Discard})
	f.register(fs)
	known := map[string]bool{kafkaSASLPasswordEnv: true, qdrantAPIKeyEnv: true, embedAPIKeyEnv: true}
	flags := map[string]bool{"pprof": true}
	fs.VisitAll(func(fl *flag.Flag) {
		known[config.EnvName(fl.Name)] = true
		flags[fl.Name] = true
	})
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, name := range regexp.MustCompile(`PROJECTOR_[A-Z0-9_]+`).FindAllString(doc, -1) {
		// The secured services of scripts/services.sh are test settings.
		if !known[name] && !strings.HasPrefix(name, "PROJECTOR_SECURE_") {
			t.Errorf("docs/security.md names %s, which projector run does not read", name)
		}
	}
	for _, m := range regexp.MustCompile("`(--[a-z0-9-]+)").FindAllStringSubmatch(doc, -1) {
		if !flags[strings.TrimPrefix(m[1], "--")] {
			t.Errorf("docs/security.md names %s, which is no flag of projector run", m[1])
		}
	}
}

// TestGraphChunkText requires the graph to leave chunk text out unless
// --graph-chunk-text or PROJECTOR_GRAPH_CHUNK_TEXT asks for it.
func TestGraphChunkText(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"--graph-chunk-text"}, nil, true},
		{"environment", nil, map[string]string{"PROJECTOR_GRAPH_CHUNK_TEXT": "true"}, true},
		{"flag wins", []string{"--graph-chunk-text=false"}, map[string]string{"PROJECTOR_GRAPH_CHUNK_TEXT": "true"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, sf, err := parseFlags(t, tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := sf.graphConfig("", nil).ChunkText; got != tt.want {
				t.Errorf("graph ChunkText = %v, want %v", got, tt.want)
			}
		})
	}
}
