package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/testenv"
	"github.com/projector/projector/internal/testtls"
)

// secured is one test's view of the secured endpoints: the Kafka SASL_SSL
// listener, PostgreSQL over TLS with the TLS-only role, the Neo4j with
// authentication and Bolt over TLS, and the Qdrant with an API key and TLS
// (all from scripts/services.sh). The secrets are the real ones of those
// services.
type secured struct {
	t  *testing.T
	w  *world
	ca string // the CA file of the services

	brokers, kafkaUser, kafkaPassword, kafkaPasswordFile string
	pgDSN, pgPassword                                    string
	neoURI, neoUser, neoPassword                         string
	qdrantAddr, qdrantKey, qdrantKeyFile                 string
	// strangerCA signed none of the services' certificates.
	strangerCA string
}

// secure finds the secured services, or skips (fails in CI) when
// scripts/services.sh did not set them up.
func secure(t *testing.T, w *world) *secured {
	t.Helper()
	env := func(service, name string) string { return testenv.Env(t, service, name) }
	read := func(service, path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			testenv.Missing(t, service, err.Error())
		}
		return strings.TrimSpace(string(b))
	}
	s := &secured{t: t, w: w, ca: env("the services' CA", "PROJECTOR_SECURE_CA_FILE")}
	s.brokers = env("Kafka SASL_SSL", "PROJECTOR_SECURE_BROKERS")
	s.kafkaUser = env("Kafka SASL_SSL", "PROJECTOR_SECURE_KAFKA_USER")
	s.kafkaPasswordFile = env("Kafka SASL_SSL", "PROJECTOR_SECURE_KAFKA_PASSWORD_FILE")
	s.kafkaPassword = read("Kafka SASL_SSL", s.kafkaPasswordFile)
	s.pgDSN = env("PostgreSQL with TLS", "PROJECTOR_SECURE_POSTGRES_DSN")
	s.pgPassword = read("PostgreSQL with TLS", env("PostgreSQL with TLS", "PROJECTOR_SECURE_POSTGRES_PASSWORD_FILE"))
	s.neoURI = env("Neo4j with authentication", "PROJECTOR_SECURE_NEO4J_URI")
	s.neoUser = env("Neo4j with authentication", "PROJECTOR_SECURE_NEO4J_USER")
	s.neoPassword = read("Neo4j with authentication", env("Neo4j with authentication", "PROJECTOR_SECURE_NEO4J_PASSWORD_FILE"))
	s.secureQdrant()
	t.Cleanup(s.cleanup)
	return s
}

// secrets are every secret the service is given, for leak checks.
func (s *secured) secrets() map[string]string {
	return map[string]string{
		"the Kafka SASL password": s.kafkaPassword, "the PostgreSQL password": s.pgPassword,
		"the Neo4j password": s.neoPassword, "the Qdrant API key": s.qdrantKey,
	}
}

// secureQdrant reads the Qdrant of scripts/services.sh that requires its
// API key and serves over TLS with the services' certificate, and gives
// the test a CA that did not sign it, to be refused with.
func (s *secured) secureQdrant() {
	t := s.t
	s.qdrantAddr = testenv.Env(t, "Qdrant with an API key", "PROJECTOR_SECURE_QDRANT_ADDR")
	s.qdrantKeyFile = testenv.Env(t, "Qdrant with an API key", "PROJECTOR_SECURE_QDRANT_API_KEY_FILE")
	b, err := os.ReadFile(s.qdrantKeyFile)
	if err != nil {
		testenv.Missing(t, "Qdrant with an API key", err.Error())
	}
	s.qdrantKey = strings.TrimSpace(string(b))
	s.strangerCA = testtls.NewCA(t, "a CA that signed none of the services").CertFile
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// args are the flags of `projector run` that point it at the secured
// services; every secret is read from a file or the environment (env).
func (s *secured) args() []string {
	return []string{
		"--brokers", s.brokers, "--kafka-tls-ca-file", s.ca,
		"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", s.kafkaUser, "--kafka-sasl-password-file", s.kafkaPasswordFile,
		"--neo4j-uri", s.neoURI, "--neo4j-user", s.neoUser, "--neo4j-tls-ca-file", s.ca,
		"--qdrant-addr", s.qdrantAddr, "--qdrant-tls-ca-file", s.ca, "--qdrant-api-key-file", s.qdrantKeyFile,
		"--log-level", "debug",
	}
}

// env is the environment of the secured `projector run`: the DSN (its
// password in a passfile) and the Neo4j password.
func (s *secured) env() []string {
	return []string{"PROJECTOR_POSTGRES_DSN=" + s.pgDSN, "PROJECTOR_NEO4J_PASSWORD=" + s.neoPassword}
}

// pg connects to the world's schema over TLS as the TLS-only role.
func (s *secured) pg() *pgxpool.Pool {
	s.t.Helper()
	pool, err := pgxpool.New(context.Background(), s.pgDSN)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	return pool
}

// trusting returns a TLS configuration that trusts the CA in caFile.
func (s *secured) trusting(caFile string) *tls.Config {
	s.t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		s.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		s.t.Fatalf("%s holds no certificate", caFile)
	}
	return &tls.Config{RootCAs: roots}
}

// neo connects to the secured Neo4j, trusting the services' CA.
func (s *secured) neo() neo4j.DriverWithContext {
	s.t.Helper()
	d, err := neo4j.NewDriverWithContext(s.neoURI, neo4j.BasicAuth(s.neoUser, s.neoPassword, ""), func(c *config.Config) {
		c.TlsConfig = s.trusting(s.ca)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

// qdrant connects to the secured Qdrant with its key over TLS.
func (s *secured) qdrant() *qdrant.Client {
	s.t.Helper()
	c, err := s.qdrantClient()
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *secured) qdrantClient() (*qdrant.Client, error) {
	host, port, _ := net.SplitHostPort(s.qdrantAddr)
	portN, _ := strconv.Atoi(port)
	return qdrant.NewClient(&qdrant.Config{Host: host, Port: portN, APIKey: s.qdrantKey, UseTLS: true,
		TLSConfig: s.trusting(s.ca), SkipCompatibilityCheck: true})
}

// cleanup removes what the world wrote to the secured stores, which the
// world's own clean-up cannot reach.
func (s *secured) cleanup() {
	ctx := context.Background()
	if pool, err := pgxpool.New(ctx, s.pgDSN); err == nil {
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.w.schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
	if d, err := neo4j.NewDriverWithContext(strings.Replace(s.neoURI, "+s://", "+ssc://", 1), neo4j.BasicAuth(s.neoUser, s.neoPassword, "")); err == nil {
		_, _ = neo4j.ExecuteQuery(ctx, d, `MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p) DETACH DELETE n`,
			map[string]any{"p": s.w.prefix}, neo4j.EagerResultTransformer)
		_ = d.Close(ctx)
	}
	if c, err := s.qdrantClient(); err == nil {
		_ = index.DropCollections(ctx, c, s.w.collection)
		_ = c.Close()
	}
}

// publishSecurely publishes lines with `projector publish` over SASL_SSL,
// configured entirely by environment variables.
func (s *secured) publishSecurely(mechanism string, lines ...string) {
	s.t.Helper()
	path := filepath.Join(s.t.TempDir(), "docs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(bin, "publish", "--topic", s.w.topic, "--file", path)
	cmd.Env = append(os.Environ(), "PROJECTOR_BROKERS="+s.brokers, "PROJECTOR_KAFKA_TLS_CA_FILE="+s.ca,
		"PROJECTOR_KAFKA_SASL_MECHANISM="+mechanism, "PROJECTOR_KAFKA_SASL_USER="+s.kafkaUser,
		"PROJECTOR_KAFKA_SASL_PASSWORD="+s.kafkaPassword)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("projector publish with %s: %v\n%s", mechanism, err, out)
	}
	s.noSecretIn("the output of projector publish", string(out))
}

// noSecretIn fails the test if text holds any secret of the service.
func (s *secured) noSecretIn(where, text string, extra ...string) {
	s.t.Helper()
	secrets := s.secrets()
	for i, x := range extra {
		secrets[fmt.Sprintf("wrong secret %d", i)] = x
	}
	for name, secret := range secrets {
		if secret == "" {
			s.t.Fatalf("%s is empty: the check would prove nothing", name)
		}
		if strings.Contains(text, secret) {
			s.t.Errorf("%s contains %s", where, name)
		}
	}
}

// TestSecuredServices runs the service against every store with
// authentication and TLS on, as production would: Kafka over SASL_SSL with
// SCRAM (and publish with each mechanism), PostgreSQL with
// sslmode=verify-full and a passfile, Neo4j with a password over bolt+s,
// Qdrant with an API key over TLS. Documents reach all three stores, a bad
// record reaches the dead-letter topic, and no secret shows up in anything
// the service printed (at debug level), in /metrics, /readyz or the
// dead-letter headers.
func TestSecuredServices(t *testing.T) {
	w := newWorld(t, 1)
	s := secure(t, w)
	s.publishSecurely("PLAIN", fmt.Sprintf(`{"document_key":%q,"version":1,"title":"plain","text":"published with SASL PLAIN"}`, w.key("plain")))
	s.publishSecurely("SCRAM-SHA-256", fmt.Sprintf(`{"document_key":%q,"version":1,"title":"scram-256","text":"published with SCRAM-SHA-256"}`, w.key("scram256")))
	s.publishSecurely("SCRAM-SHA-512", fmt.Sprintf(`{"document_key":%q,"version":1,"title":"scram-512","chunks":[{"text":"one"},{"text":"two"}]}`, w.key("scram512")))
	w.produce(&kgo.Record{Key: []byte(w.key("bad")), Value: []byte(`{"document_key":"` + w.key("bad") + `","version":"not a number"}`)})

	p := w.start(s.env(), s.args()...)
	w.waitDrained(p, 2*time.Minute)
	_, metrics := p.get("/metrics")
	code, ready := p.get("/readyz")
	if code != 200 {
		t.Errorf("readyz: %d %q, want 200", code, ready)
	}
	p.stop()

	ctx := context.Background()
	var docs, chunks int
	err := s.pg().QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+
		"), (SELECT count(*) FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize()+")").Scan(&docs, &chunks)
	if err != nil {
		t.Fatal(err)
	}
	if docs != 3 || chunks != 4 {
		t.Errorf("PostgreSQL holds %d documents and %d chunks, want 3 and 4", docs, chunks)
	}
	res, err := neo4j.ExecuteQuery(ctx, s.neo(), `MATCH (:Document)-[:HAS_CHUNK]->(c:Chunk) WHERE c.document_key STARTS WITH $p RETURN count(c) AS n`,
		map[string]any{"p": w.prefix}, neo4j.EagerResultTransformer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := neo4j.GetRecordValue[int64](res.Records[0], "n"); n != 4 {
		t.Errorf("Neo4j holds %d chunks, want 4", n)
	}
	points, err := s.qdrant().Count(ctx, &qdrant.CountPoints{CollectionName: w.collection, Exact: qdrant.PtrOf(true)})
	if err != nil {
		t.Fatal(err)
	}
	if points != 4 {
		t.Errorf("Qdrant holds %d points, want 4", points)
	}

	letters := w.deadLetters()
	if len(letters) != 1 || header(letters[0], "projector-error-reason") != "wrong_type" {
		t.Fatalf("dead letters: %d, want the bad record with reason wrong_type", len(letters))
	}
	var headers strings.Builder
	for _, h := range letters[0].Headers {
		fmt.Fprintf(&headers, "%s=%s\n", h.Key, h.Value)
	}
	s.noSecretIn("the dead-letter headers", headers.String())
	s.noSecretIn("/metrics", metrics)
	s.noSecretIn("/readyz", ready)
	s.noSecretIn("the output of projector run", p.log.String())
	if !strings.Contains(p.log.String(), `"level":"debug"`) {
		t.Errorf("the service printed no debug line: the leak check saw less than it could")
	}
}

// TestWrongCredentials starts the service with one wrong secret at a time.
// A wrong credential never heals by waiting, so the service must stop at
// start, within seconds, with exit status 1 and an error that names the
// server, and without printing the wrong secret or any right one. The
// Neo4j case runs last and once: Neo4j locks a user for 5 s after three
// failed logins in a row.
func TestWrongCredentials(t *testing.T) {
	w := newWorld(t, 1)
	s := secure(t, w)
	dir := t.TempDir()
	wrongFile := func(name, secret string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	u, err := url.Parse(s.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "wrong-postgres-"+randomHex(t))
	wrongPG, _ := u.User.Password()
	wrongKafka, wrongQdrant, wrongNeo := "wrong-kafka-"+randomHex(t), "wrong-qdrant-"+randomHex(t), "wrong-neo4j-"+randomHex(t)
	tests := []struct {
		name  string
		env   []string
		args  []string
		wrong string
		want  []string // in the error the service prints last
	}{
		{name: "Kafka SASL password", args: []string{"--kafka-sasl-password-file", wrongFile("kafka", wrongKafka)}, wrong: wrongKafka,
			want: []string{"list Kafka topics", "SASL_AUTHENTICATION_FAILED"}},
		{name: "Kafka CA", args: []string{"--kafka-tls-ca-file", s.strangerCA}, wrong: wrongKafka,
			want: []string{"list Kafka topics", "certificate signed by unknown authority"}},
		{name: "Qdrant API key", args: []string{"--qdrant-api-key-file", wrongFile("qdrant", wrongQdrant)}, wrong: wrongQdrant,
			want: []string{"prepare index store (Qdrant)", "Invalid API key"}},
		{name: "Qdrant CA", args: []string{"--qdrant-tls-ca-file", s.strangerCA}, wrong: wrongQdrant,
			want: []string{"prepare index store (Qdrant)", "certificate signed by unknown authority"}},
		{name: "PostgreSQL password", env: []string{"PROJECTOR_POSTGRES_DSN=" + u.String()}, wrong: wrongPG,
			want: []string{"prepare relational store (PostgreSQL)", "password authentication failed"}},
		{name: "PostgreSQL without TLS", env: []string{"PROJECTOR_POSTGRES_DSN=" + strings.Replace(s.pgDSN, "sslmode=verify-full", "sslmode=disable", 1)}, wrong: wrongPG,
			want: []string{"prepare relational store (PostgreSQL)", "no encryption"}},
		{name: "Neo4j password", env: []string{"PROJECTOR_NEO4J_PASSWORD=" + wrongNeo}, wrong: wrongNeo,
			want: []string{"prepare graph store (Neo4j)", "Neo.ClientError.Security.Unauthorized"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			p := w.start(append(s.env(), tt.env...), append(s.args(), tt.args...)...)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the service still runs 30 s after start with a wrong %s; want it to stop", tt.name)
			}
			took := time.Since(start)
			if p.err == nil {
				t.Fatalf("the service exited with status 0, want 1")
			}
			if exit, ok := p.err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
				t.Errorf("the service ended with %v, want exit status 1", p.err)
			}
			out := p.log.String()
			lines := scanLines(out)
			last := lines[len(lines)-1]
			for _, want := range tt.want {
				if !strings.Contains(last, want) {
					t.Errorf("last line %q does not say %q", last, want)
				}
			}
			s.noSecretIn("the output of projector run", out, tt.wrong)
			t.Logf("stopped after %s: %s", took.Round(time.Millisecond), last)
		})
	}
}

// TestPasswordFlagWarns gives the Neo4j password as a flag value, which
// any user of the machine can read with ps: the service works, and warns.
func TestPasswordFlagWarns(t *testing.T) {
	w := newWorld(t, 1)
	s := secure(t, w)
	p := w.start([]string{"PROJECTOR_POSTGRES_DSN=" + s.pgDSN}, append(s.args(), "--neo4j-password", s.neoPassword)...)
	waitFor(t, time.Minute, "the service to be ready", func() bool {
		code, _ := p.get("/readyz")
		return code == 200 || p.exited()
	})
	p.stop()
	var warned bool
	for _, line := range scanLines(p.log.String()) {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"flag":"--neo4j-password"`) &&
			strings.Contains(line, "PROJECTOR_NEO4J_PASSWORD") {
			warned = true
			if strings.Contains(line, s.neoPassword) {
				t.Errorf("the warning quotes the password: %s", line)
			}
		}
	}
	if !warned {
		t.Errorf("no warning about --neo4j-password on the command line:\n%s", tail(p.log.String(), 20))
	}
}
