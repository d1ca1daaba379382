package services

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Config is everything the environment can change, read once by
// ConfigFromEnv; the defaults are those scripts/services.sh always had.
type Config struct {
	// Root is the checkout: .services (data, pid files, logs) and .cache
	// (downloaded jars) live in it.
	Root string
	// Services are the names of SERVICES, what up, status and clean take
	// without names; nil means the default set.
	Services []string

	PGPort, KafkaPort, KafkaControllerPort, KafkaSecurePort    int
	Neo4jBoltPort, Neo4jSecureBoltPort                         int
	QdrantHTTPPort, QdrantGRPCPort                             int
	QdrantSecureHTTPPort, QdrantSecureGRPCPort                 int
	Cluster                                                    bool
	ClusterPort, ClusterControllerPort                         int
	Java                                                       string
	KafkaHeap, Neo4jHeap                                       []string
	KafkaVersion, Neo4jVersion                                 string // empty: the pom's
	QdrantBin, QdrantAddr, QdrantEngineCache                   string
	StartTimeoutPostgres, StartTimeoutKafka, StartTimeoutNeo4j time.Duration
	StartTimeoutQdrant, StopTimeout                            time.Duration
}

// The variables ConfigFromEnv reads, with their defaults.
const (
	defaultClusterPort           = 19092
	defaultClusterControllerPort = 19192
)

// ConfigFromEnv reads the configuration from getenv (os.Getenv), where an
// empty variable counts as unset, as ${VAR:-default} in the script did.
func ConfigFromEnv(root string, getenv func(string) string) (Config, error) {
	get := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var errs []string
	port := func(name string, def int) int {
		v := get(name, strconv.Itoa(def))
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Sprintf("%s=%s is not a port", name, v))
		}
		return p
	}
	cfg := Config{
		Root:                  root,
		PGPort:                port("PG_PORT", 5432),
		KafkaPort:             port("KAFKA_PORT", 9092),
		KafkaControllerPort:   port("KAFKA_CONTROLLER_PORT", 9093),
		KafkaSecurePort:       port("KAFKA_SECURE_PORT", 9094),
		Neo4jBoltPort:         port("NEO4J_BOLT_PORT", 7687),
		Neo4jSecureBoltPort:   port("NEO4J_SECURE_BOLT_PORT", 7688),
		QdrantHTTPPort:        port("QDRANT_HTTP_PORT", 6333),
		QdrantGRPCPort:        port("QDRANT_GRPC_PORT", 6334),
		QdrantSecureHTTPPort:  port("QDRANT_SECURE_HTTP_PORT", 6343),
		QdrantSecureGRPCPort:  port("QDRANT_SECURE_GRPC_PORT", 6344),
		ClusterPort:           port("KAFKA_CLUSTER_PORT", defaultClusterPort),
		ClusterControllerPort: port("KAFKA_CLUSTER_CONTROLLER_PORT", defaultClusterControllerPort),
		Java:                  get("JAVA", "java"),
		KafkaHeap:             strings.Fields(get("KAFKA_HEAP", "-Xms256m -Xmx768m")),
		Neo4jHeap:             strings.Fields(get("NEO4J_HEAP", "-Xms512m -Xmx1g")),
		KafkaVersion:          getenv("KAFKA_VERSION"),
		Neo4jVersion:          getenv("NEO4J_VERSION"),
		QdrantBin:             getenv("QDRANT_BIN"),
		QdrantAddr:            getenv("QDRANT_ADDR"),
		QdrantEngineCache:     get("QDRANT_ENGINE_CACHE", get("XDG_CACHE_HOME", getenv("HOME")+"/.cache")+"/projector/qdrant-engine"),
		StartTimeoutPostgres:  60 * time.Second,
		StartTimeoutKafka:     120 * time.Second,
		StartTimeoutNeo4j:     180 * time.Second,
		StartTimeoutQdrant:    60 * time.Second,
		StopTimeout:           30 * time.Second,
	}
	if s := getenv("SERVICES"); strings.TrimSpace(s) != "" {
		cfg.Services = strings.Fields(s)
	}
	switch v := getenv("KAFKA_CLUSTER"); v {
	case "", "0", "false", "no":
	case "1", "true", "yes":
		cfg.Cluster = true
	default:
		errs = append(errs, fmt.Sprintf("KAFKA_CLUSTER=%s: want 1 (start the three-broker cluster too) or 0", v))
	}
	// The cluster's nodes take the ports from its base ports on.
	if cfg.ClusterPort+clusterNodes-1 > 65535 || cfg.ClusterControllerPort+clusterNodes-1 > 65535 {
		errs = append(errs, fmt.Sprintf("KAFKA_CLUSTER_PORT and KAFKA_CLUSTER_CONTROLLER_PORT leave no room for %d nodes", clusterNodes))
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

// The directories of a checkout, all below Root.
func (c Config) servicesDir() string { return filepath.Join(c.Root, ".services") }
func (c Config) cacheDir() string    { return filepath.Join(c.Root, ".cache") }
func (c Config) logDir() string      { return filepath.Join(c.servicesDir(), "logs") }
func (c Config) runDir() string      { return filepath.Join(c.servicesDir(), "run") }
func (c Config) tlsDir() string      { return filepath.Join(c.servicesDir(), "tls") }
func (c Config) secretsDir() string  { return filepath.Join(c.servicesDir(), "secrets") }

// logFile is where a service's output goes.
func (c Config) logFile(name string) string { return filepath.Join(c.logDir(), name+".log") }
