package services

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// environ returns a getenv of the given variables only.
func environ(vars ...string) func(string) string {
	m := map[string]string{}
	for _, v := range vars {
		k, val, _ := strings.Cut(v, "=")
		m[k] = val
	}
	return func(k string) string { return m[k] }
}

func TestConfigFromEnvDefaults(t *testing.T) {
	cfg, err := ConfigFromEnv("/ROOT", environ("HOME=/home/u"))
	if err != nil {
		t.Fatal(err)
	}
	ports := []struct {
		name      string
		got, want int
	}{
		{"PG_PORT", cfg.PGPort, 5432}, {"KAFKA_PORT", cfg.KafkaPort, 9092},
		{"KAFKA_CONTROLLER_PORT", cfg.KafkaControllerPort, 9093}, {"KAFKA_SECURE_PORT", cfg.KafkaSecurePort, 9094},
		{"NEO4J_BOLT_PORT", cfg.Neo4jBoltPort, 7687}, {"NEO4J_SECURE_BOLT_PORT", cfg.Neo4jSecureBoltPort, 7688},
		{"QDRANT_HTTP_PORT", cfg.QdrantHTTPPort, 6333}, {"QDRANT_GRPC_PORT", cfg.QdrantGRPCPort, 6334},
		{"QDRANT_SECURE_HTTP_PORT", cfg.QdrantSecureHTTPPort, 6343}, {"QDRANT_SECURE_GRPC_PORT", cfg.QdrantSecureGRPCPort, 6344},
		{"KAFKA_CLUSTER_PORT", cfg.ClusterPort, 19092}, {"KAFKA_CLUSTER_CONTROLLER_PORT", cfg.ClusterControllerPort, 19192},
	}
	for _, p := range ports {
		if p.got != p.want {
			t.Errorf("%s = %d, want %d", p.name, p.got, p.want)
		}
	}
	if cfg.Cluster || cfg.Services != nil || cfg.Java != "java" {
		t.Errorf("cluster %v, services %v, java %q; want off, the default set, java", cfg.Cluster, cfg.Services, cfg.Java)
	}
	if got, want := strings.Join(cfg.KafkaHeap, " "), "-Xms256m -Xmx768m"; got != want {
		t.Errorf("KAFKA_HEAP = %q, want %q", got, want)
	}
	if got, want := cfg.QdrantEngineCache, "/home/u/.cache/projector/qdrant-engine"; got != want {
		t.Errorf("engine cache = %q, want %q", got, want)
	}
}

func TestConfigFromEnvOverrides(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		// check returns what it found and what it wants.
		check func(Config) (got, want string)
	}{
		{"a port", []string{"PG_PORT=15432"}, func(c Config) (string, string) { return strconv.Itoa(c.PGPort), "15432" }},
		{"an empty variable is unset", []string{"PG_PORT="}, func(c Config) (string, string) { return strconv.Itoa(c.PGPort), "5432" }},
		{"SERVICES", []string{"SERVICES=  kafka   postgres "}, func(c Config) (string, string) { return strings.Join(c.Services, ","), "kafka,postgres" }},
		{"heap flags", []string{"NEO4J_HEAP=-Xmx2g  -Xms1g"}, func(c Config) (string, string) { return strings.Join(c.Neo4jHeap, ","), "-Xmx2g,-Xms1g" }},
		{"XDG cache", []string{"HOME=/home/u", "XDG_CACHE_HOME=/xdg"}, func(c Config) (string, string) {
			return c.QdrantEngineCache, "/xdg/projector/qdrant-engine"
		}},
		{"engine cache wins", []string{"XDG_CACHE_HOME=/xdg", "QDRANT_ENGINE_CACHE=/q/"}, func(c Config) (string, string) { return c.QdrantEngineCache, "/q/" }},
		{"cluster on", []string{"KAFKA_CLUSTER=1"}, func(c Config) (string, string) {
			return strings.Join(c.clusterBrokers(), ","), "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
		}},
		{"cluster ports", []string{"KAFKA_CLUSTER=true", "KAFKA_CLUSTER_PORT=29000"}, func(c Config) (string, string) {
			return strings.Join(c.clusterBrokers(), ","), "127.0.0.1:29000,127.0.0.1:29001,127.0.0.1:29002"
		}},
		{"cluster off", []string{"KAFKA_CLUSTER=0"}, func(c Config) (string, string) { return map[bool]string{true: "on", false: "off"}[c.Cluster], "off" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ConfigFromEnv("/ROOT", environ(tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tt.check(cfg); got != want {
				t.Errorf("%v: got %q, want %q", tt.env, got, want)
			}
		})
	}
}

func TestConfigFromEnvRefusesNonsense(t *testing.T) {
	for _, env := range [][]string{{"PG_PORT=abc"}, {"KAFKA_PORT=0"}, {"QDRANT_GRPC_PORT=70000"}, {"KAFKA_CLUSTER=maybe"}, {"KAFKA_CLUSTER_PORT=65534"}} {
		if _, err := ConfigFromEnv("/ROOT", environ(env...)); err == nil {
			t.Errorf("%v: no error, want one naming the variable", env)
		} else if name, _, _ := strings.Cut(env[0], "="); !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %q does not name %s", env, err, name)
		}
	}
}

// TestEnvSameAsScript compares env with what the bash scripts/services.sh
// printed for the same variables (testdata/env-*.golden, with its checkout
// as /ROOT and the engine's path as /QBIN).
func TestEnvSameAsScript(t *testing.T) {
	tests := []struct {
		golden string
		env    []string
		extra  string
	}{
		{"env-default.golden", []string{"HOME=/home/u"}, ""},
		{"env-ports.golden", []string{"HOME=/home/u", "PG_PORT=15432", "KAFKA_PORT=19092", "KAFKA_SECURE_PORT=19094", "NEO4J_BOLT_PORT=17687",
			"NEO4J_SECURE_BOLT_PORT=17688", "QDRANT_GRPC_PORT=16334", "QDRANT_SECURE_GRPC_PORT=16344", "QDRANT_ADDR=10.0.0.1:6334", "QDRANT_ENGINE_CACHE=/cache/q"}, ""},
		// The cluster adds one line, and changes none.
		{"env-default.golden", []string{"HOME=/home/u", "KAFKA_CLUSTER=1"}, "export PROJECTOR_TEST_CLUSTER_BROKERS='127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094'\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", tt.golden))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ConfigFromEnv("/ROOT", environ(tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			if got := envLines(cfg, "/QBIN"); got != string(want)+tt.extra {
				t.Errorf("env printed\n%s\nwant\n%s%s", got, want, tt.extra)
			}
		})
	}
}

func TestQdrantBinPath(t *testing.T) {
	cfg, err := ConfigFromEnv(t.TempDir(), environ("QDRANT_BIN=/opt/qdrant"))
	if err != nil {
		t.Fatal(err)
	}
	// QDRANT_BIN wins, without a look at qdrant-engine's sources.
	if got, err := New(cfg, nil, nil).qdrantBinPath(); err != nil || got != "/opt/qdrant" {
		t.Errorf("qdrantBinPath with QDRANT_BIN = %q, %v; want /opt/qdrant", got, err)
	}
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "qdrant-engine"), os.DirFS("testdata/engine")); err != nil {
		t.Fatal(err)
	}
	cfg, err = ConfigFromEnv(root, environ("QDRANT_ENGINE_CACHE=/cache"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := New(cfg, nil, nil).qdrantBinPath(); err != nil || got != "/cache/6964dab0cdb1/qdrant-engine" {
		t.Errorf("qdrantBinPath = %q, %v; want /cache/6964dab0cdb1/qdrant-engine", got, err)
	}
}
