package services

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func defaultConfig(t *testing.T, env ...string) Config {
	t.Helper()
	cfg, err := ConfigFromEnv("/ROOT", environ(env...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The goldens are what the bash scripts/services.sh wrote for the same
// settings, so a broker or a Qdrant started by the program runs as before.
func TestConfigsSameAsScript(t *testing.T) {
	cfg := defaultConfig(t)
	tests := []struct {
		name, got, golden string
	}{
		{"kafka", kafkaConfig(cfg, "/ROOT/.services/kafka", "kafka-password-0123456789abcdef01234567"), "kafka.properties"},
		{"qdrant", qdrantConfig("/ROOT/.services/qdrant", 6333, 6334, "", ""), "qdrant.yaml"},
		{"qdrant-secure", qdrantConfig("/ROOT/.services/qdrant-secure", 6343, 6344, "qdrant-api-key-0123456789abcdef01234567", "/ROOT/.services/tls"), "qdrant-secure.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if want := golden(t, tt.golden); tt.got != want {
				t.Errorf("got\n%s\nwant (testdata/%s)\n%s", tt.got, tt.golden, want)
			}
		})
	}
}

// properties parses a server.properties.
func properties(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

func TestClusterNodeConfig(t *testing.T) {
	cfg := defaultConfig(t, "KAFKA_CLUSTER_PORT=29092", "KAFKA_CLUSTER_CONTROLLER_PORT=29192")
	voters := "1@127.0.0.1:29192,2@127.0.0.1:29193,3@127.0.0.1:29194"
	for n := 1; n <= clusterNodes; n++ {
		p := properties(clusterNodeConfig(cfg, n, "/ROOT/.services/kafka-"+strconv.Itoa(n)))
		want := map[string]string{
			"node.id":                                  strconv.Itoa(n),
			"process.roles":                            "broker,controller",
			"controller.quorum.voters":                 voters,
			"listeners":                                "PLAINTEXT://127.0.0.1:" + strconv.Itoa(29091+n) + ",CONTROLLER://127.0.0.1:" + strconv.Itoa(29191+n),
			"advertised.listeners":                     "PLAINTEXT://127.0.0.1:" + strconv.Itoa(29091+n),
			"log.dirs":                                 "/ROOT/.services/kafka-" + strconv.Itoa(n) + "/data",
			"default.replication.factor":               "3",
			"min.insync.replicas":                      "2",
			"offsets.topic.replication.factor":         "3",
			"transaction.state.log.replication.factor": "3",
			"transaction.state.log.min.isr":            "2",
		}
		for k, v := range want {
			if p[k] != v {
				t.Errorf("node %d: %s=%q, want %q", n, k, p[k], v)
			}
		}
		if _, ok := p["controller.quorum.bootstrap.servers"]; ok {
			t.Errorf("node %d: a dynamic quorum (controller.quorum.bootstrap.servers) beside the static voters", n)
		}
	}
}

func TestWithTLSRules(t *testing.T) {
	initdb := "# TYPE  DATABASE        USER            ADDRESS                 METHOD\nhost    all             all             127.0.0.1/32            scram-sha-256\n"
	once, changed := withTLSRules(initdb)
	if !changed || !strings.HasPrefix(once, tlsRules) || !strings.HasSuffix(once, initdb) {
		t.Fatalf("withTLSRules = %q, %v; want the rules on top of initdb's", once, changed)
	}
	// First match wins: the hostssl rule must come before any host line.
	lines := strings.Split(once, "\n")
	if i, j := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "hostssl projector projector_tls") }),
		slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "host ") }); i < 0 || i > j {
		t.Errorf("hostssl rule at line %d, first host line at %d; want it first", i, j)
	}
	if twice, changed := withTLSRules(once); changed || twice != once {
		t.Errorf("a second withTLSRules changed the file: %q", twice)
	}
}

func TestPrependTLSRulesKeepsMode(t *testing.T) {
	hba := filepath.Join(t.TempDir(), "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("host all all 127.0.0.1/32 scram-sha-256\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := prependTLSRules(hba); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(hba)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("pg_hba.conf mode %v after the rules, want 0600 as initdb made it", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(hba); !strings.HasPrefix(string(b), tlsRules) {
		t.Errorf("pg_hba.conf = %q, want the rules on top", b)
	}
}

// TestEngineKey: the key names the cache directory of a qdrant-engine
// build; it must be the one the script computed (find | sort | xargs
// sha1sum | sha1sum), or a checkout would build the engine again for
// minutes. 6964dab0cdb1 is what that pipeline printed for testdata/engine.
func TestEngineKey(t *testing.T) {
	key, err := engineKey("testdata/engine")
	if err != nil {
		t.Fatal(err)
	}
	if key != "6964dab0cdb1" {
		t.Errorf("engineKey = %s, want 6964dab0cdb1", key)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/engine")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k, _ := engineKey(dir); k != key {
		t.Errorf("a README changed the key to %s: only sources count", k)
	}
	if err := os.WriteFile(filepath.Join(dir, "src/main.rs"), []byte("fn main() { }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k, _ := engineKey(dir); k == key {
		t.Errorf("a changed source kept the key %s", k)
	}
	if _, err := engineKey(t.TempDir()); err == nil {
		t.Errorf("engineKey of a directory without sources: no error")
	}
}

// TestCksum: the values of POSIX cksum(1), by which a checkout names its
// PostgreSQL cluster outside it.
func TestCksum(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint32
	}{{"", 4294967295}, {"123456789", 930766865}, {"/work/main", 2674982963}, {"/work/wt-services", 976350243}} {
		if got := cksum([]byte(tt.in)); got != tt.want {
			t.Errorf("cksum(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	dirs := []string{"/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/10/bin"}
	slices.SortFunc(dirs, compareVersions)
	want := []string{"/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/10/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin"}
	if !slices.Equal(dirs, want) {
		t.Errorf("sorted %v, want %v (as sort -V)", dirs, want)
	}
}

func TestJarsResolve(t *testing.T) {
	pom := filepath.Join(t.TempDir(), "pom.xml")
	body := "<project>\n  <properties>\n    <kafka.version>4.1.1</kafka.version>\n  </properties>\n</project>\n"
	if err := os.WriteFile(pom, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	key := cacheKey([]byte(body))
	for _, tt := range []struct {
		override, version string
	}{{"", "4.1.1"}, {"4.0.2", "4.0.2"}} {
		version, dir, err := jars{name: "kafka", pom: pom, property: "kafka.version", version: tt.override}.resolve("/cache")
		if err != nil {
			t.Fatal(err)
		}
		if want := "/cache/kafka-" + tt.version + "-" + key; version != tt.version || dir != want {
			t.Errorf("override %q: %s in %s, want %s in %s", tt.override, version, dir, tt.version, want)
		}
	}
	if len(key) != 8 {
		t.Errorf("cache key %q, want 8 hex digits as the script's sha1sum | cut -c1-8", key)
	}
}

func TestDescribeQdrant(t *testing.T) {
	for _, tt := range []struct{ version, engine, want string }{
		{"1.17.0", "qdrant-edge 0.9.0", "qdrant-engine: Qdrant API 1.17.0 on Qdrant's engine qdrant-edge 0.9.0"},
		{"1.17.1", "", "the Qdrant server 1.17.1"},
		{"", "", "the Qdrant server of unknown version"},
	} {
		if got := describeQdrant(tt.version, tt.engine); got != tt.want {
			t.Errorf("describeQdrant(%q, %q) = %q, want %q", tt.version, tt.engine, got, tt.want)
		}
	}
}
