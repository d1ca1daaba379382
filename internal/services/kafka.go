package services

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The Apache Kafka broker, from the jars of scripts/kafka/pom.xml: one node
// that is both broker and controller (KRaft), with a plain listener, the
// controller's, and a SASL_SSL listener with SCRAM and PLAIN users. With
// KAFKA_CLUSTER=1, also a cluster of three such nodes (kafka-1, kafka-2,
// kafka-3) on ports of their own, with plain listeners only, for the tests
// of a broker failover.

// clusterNodes is the size of the opt-in cluster; node N is the service
// kafka-N, with node.id N.
const clusterNodes = 3

func (r *Runner) kafkaJars() jars {
	return jars{name: "kafka", pom: filepath.Join(r.cfg.Root, "scripts/kafka/pom.xml"), property: "kafka.version", version: r.cfg.KafkaVersion}
}

// kafkaJava is the command line of a Kafka JVM on the jars in dir, up to
// its main class. log4j2's own shutdown hook would stop logging before the
// broker's hook has logged its shutdown; without it the log shows it all.
func (r *Runner) kafkaJava(dir string) []string {
	argv := append([]string{r.cfg.Java}, r.cfg.KafkaHeap...)
	return append(argv, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+filepath.Join(r.cfg.Root, "scripts/kafka/log4j2.properties"),
		"-Dlog4j2.shutdownHookEnabled=false", "-cp", dir+"/lib/*")
}

// newClusterID returns a Kafka cluster id as kafka-storage random-uuid
// prints one: 16 random bytes in URL-safe base64, never starting with "-".
func newClusterID() (string, error) {
	for {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id, nil
		}
	}
}

// format formats a node's KRaft storage, once, with the cluster id.
func (r *Runner) format(ctx context.Context, name, dir, properties, clusterID string, extra ...string) error {
	logf := filepath.Join(r.cfg.logDir(), name+"-format.log")
	argv := append(r.kafkaJava(dir), "kafka.tools.StorageTool", "format", "-t", clusterID, "-c", properties)
	argv = append(argv, extra...)
	if err := overwritten(exec.CommandContext(ctx, argv[0], argv[1:]...), logf); err != nil {
		return &Failure{Service: name, Log: logf, Reason: "StorageTool format failed"}
	}
	return nil
}

// --- the single broker -----------------------------------------------------------

func (r *Runner) kafka() service {
	home := filepath.Join(r.cfg.servicesDir(), "kafka")
	return service{
		name:  "kafka",
		addr:  func() string { return fmt.Sprintf("127.0.0.1:%d", r.cfg.KafkaPort) },
		up:    r.pidUp("kafka"),
		start: func(ctx context.Context) error { return r.startKafka(ctx, home) },
		wait:  r.waitKafka,
		stop:  func(ctx context.Context) error { return r.stopPIDService(ctx, "kafka") },
		kill:  func(ctx context.Context) error { return r.killPIDService(ctx, "kafka") },
		data:  func(context.Context) []string { return []string{home} },
	}
}

// pidUp returns the up check of a service started by launch.
func (r *Runner) pidUp(name string) func(context.Context) bool {
	return func(context.Context) bool {
		_, ok := r.runningPID(name)
		return ok
	}
}

// kafkaConfig is the single broker's server.properties, written on every
// start so that port overrides take effect.
func kafkaConfig(c Config, home, plainPassword string) string {
	return fmt.Sprintf(`# Written by scripts/services.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
# The secured listener: TLS with the dev certificate, then SASL. SCRAM users live
# in the cluster metadata (wait_kafka adds them); PLAIN's user is listed here.
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=%[4]s/kafka-keystore.pem
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_projector="%[5]s";
log.dirs=%[6]s/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
# Fewer group-coordinator partitions than the default 50: a faster first start.
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
`, c.KafkaPort, c.KafkaControllerPort, c.KafkaSecurePort, c.tlsDir(), plainPassword, home)
}

func (r *Runner) startKafka(ctx context.Context, home string) error {
	j := r.kafkaJars()
	version, dir, err := j.resolve(r.cfg.cacheDir())
	if err != nil {
		return err
	}
	properties := filepath.Join(home, "server.properties")
	if _, ok := r.runningPID("kafka"); ok {
		// The configuration is written on every start: it tells how this one started.
		if b, err := os.ReadFile(properties); err == nil && regexp.MustCompile(`(?m)^listeners=.*SASL_SSL://`).Match(b) {
			r.logf("kafka: already running")
			return nil
		}
		r.logf("kafka: running without the SASL_SSL listener (started by an older scripts/services.sh); restarting it")
		if err := r.stopPIDService(ctx, "kafka"); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		port     int
		variable string
	}{{r.cfg.KafkaPort, "KAFKA_PORT"}, {r.cfg.KafkaControllerPort, "KAFKA_CONTROLLER_PORT"}, {r.cfg.KafkaSecurePort, "KAFKA_SECURE_PORT"}} {
		if err := requireFreePort(ctx, "kafka", p.port, p.variable); err != nil {
			return err
		}
	}
	if err := r.fetch(ctx, j, version, dir); err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	password, err := r.secret("kafka-password")
	if err != nil {
		return err
	}
	// It holds the PLAIN password: readable by this user only.
	if err := writeFile(properties, []byte(kafkaConfig(r.cfg, home, password)), 0o600); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(home, "data/meta.properties")); err != nil {
		// KRaft storage is formatted once, with a new cluster id;
		// --standalone makes this node the only voter of the metadata
		// quorum. The quorum remembers the controller port: changing
		// KAFKA_CONTROLLER_PORT later needs `clean kafka`.
		r.logf("kafka: formatting storage in %s/data", home)
		id, err := newClusterID()
		if err != nil {
			return err
		}
		if err := r.format(ctx, "kafka", dir, properties, id, "--standalone"); err != nil {
			return err
		}
	}
	r.logf("kafka: starting Kafka %s on 127.0.0.1:%d (controller 127.0.0.1:%d, SASL_SSL 127.0.0.1:%d)",
		version, r.cfg.KafkaPort, r.cfg.KafkaControllerPort, r.cfg.KafkaSecurePort)
	return r.launch("kafka", "", append(r.kafkaJava(dir), "kafka.Kafka", properties)...)
}

// waitForBroker waits until the broker at addr, node node, serves clients,
// and returns what its ApiVersions answers match.
func (r *Runner) waitForBroker(ctx context.Context, name, addr string, node int32) (string, error) {
	var guess string
	err := r.waitUntil(ctx, name, r.cfg.logFile(name), r.cfg.StartTimeoutKafka, r.pidUp(name), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var err error
		guess, err = probeKafka(ctx, addr, node)
		return err
	})
	return guess, err
}

func (r *Runner) waitKafka(ctx context.Context) error {
	addr := fmt.Sprintf("127.0.0.1:%d", r.cfg.KafkaPort)
	guess, err := r.waitForBroker(ctx, "kafka", addr, 1)
	if err != nil {
		return err
	}
	r.logf("kafka: up on %s (Apache Kafka %s; ApiVersions match %s)", addr, loggedKafkaVersion(r.cfg.logFile("kafka")), guess)
	// SCRAM credentials are cluster metadata: add them through the admin API
	// on every start (an upsert), so a broker formatted before they existed
	// gets them too; then log in over SASL_SSL to prove the listener works.
	password, err := r.secret("kafka-password")
	if err != nil {
		return err
	}
	secure := fmt.Sprintf("127.0.0.1:%d", r.cfg.KafkaSecurePort)
	logf := filepath.Join(r.cfg.logDir(), "kafka-scram.log")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	result := fmt.Sprintf("user projector: SCRAM-SHA-256 and SCRAM-SHA-512 set, login over SASL_SSL on %s works\n", secure)
	err = addSCRAM(sctx, addr, secure, filepath.Join(r.cfg.tlsDir(), "ca.crt"), "projector", password)
	if err != nil {
		result = fmt.Sprintf("kafka scram: %v\n", err)
	}
	if werr := os.WriteFile(logf, []byte(result), 0o644); werr != nil {
		return werr
	}
	if err != nil {
		return &Failure{Service: "kafka", Log: logf, Reason: fmt.Sprintf("cannot add the SCRAM user projector or log in on %s", secure)}
	}
	r.logf("kafka: SASL_SSL on %s (user projector: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN)", secure)
	return nil
}

// loggedKafkaVersion returns the exact version the broker logged at start
// (AppInfoParser), or "?".
func loggedKafkaVersion(logf string) string {
	f, err := os.Open(logf)
	if err != nil {
		return "?"
	}
	defer f.Close()
	re := regexp.MustCompile(`Kafka version: ([^ ]*)`)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil && m[1] != "" {
			return m[1]
		}
	}
	return "?"
}

// probeKafka asks the broker at addr once whether it serves clients: its
// metadata must list the broker node (a restarted node is listed once it
// is unfenced) and a controller, and every broker must answer ApiVersions.
// It returns the versions those answers match, e.g. "v4.1".
func probeKafka(ctx context.Context, addr string, node int32) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return "", fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	if md.Controller < 0 || !slices.ContainsFunc(md.Brokers, func(b kadm.BrokerDetail) bool { return b.NodeID == node }) {
		return "", fmt.Errorf("metadata lists no controller or not broker %d yet", node)
	}
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return "", fmt.Errorf("api versions: %w", err)
	}
	var guesses []string
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("api versions of broker %d: %w", v.NodeID, v.Err)
		}
		guesses = append(guesses, v.VersionGuess())
	}
	return strings.Join(guesses, ", "), nil
}

// addSCRAM gives user SCRAM-SHA-256 and SCRAM-SHA-512 credentials through
// the admin API of brokers (AlterUserScramCredentials), then logs in with
// them over the SASL_SSL listener secure to prove that it works.
func addSCRAM(ctx context.Context, brokers, secure, caFile, user, password string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// One request may alter a user only once: one call per mechanism.
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: m, Password: password, Iterations: 8192}})
		if err != nil {
			return fmt.Errorf("alter %s credentials: %w", m, err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil {
				return fmt.Errorf("alter %s credentials of %s: %w (%s)", m, r.User, r.Err, r.ErrMessage)
			}
		}
	}
	pool, err := readCA(caFile)
	if err != nil {
		return err
	}
	// The broker applies the credentials from its metadata log a moment
	// after the admin call returns: try the login until it works.
	for {
		err := login(ctx, secure, pool, user, password)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("log in on %s: %w", secure, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func login(ctx context.Context, secure string, roots *x509.CertPool, user, password string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(secure),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
		kgo.DialTimeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 {
		return errors.New("metadata lists no broker")
	}
	return nil
}

// --- the opt-in cluster -----------------------------------------------------------

func nodeName(n int) string { return fmt.Sprintf("kafka-%d", n) }

// clusterBrokers are the bootstrap addresses of the cluster's nodes.
func (c Config) clusterBrokers() []string {
	var addrs []string
	for n := 1; n <= clusterNodes; n++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", c.ClusterPort+n-1))
	}
	return addrs
}

func (r *Runner) clusterNode(n int) service {
	name := nodeName(n)
	home := filepath.Join(r.cfg.servicesDir(), name)
	addr := fmt.Sprintf("127.0.0.1:%d", r.cfg.ClusterPort+n-1)
	return service{
		name:   name,
		optIn:  true,
		quorum: true,
		addr:   func() string { return addr },
		up:     r.pidUp(name),
		start:  func(ctx context.Context) error { return r.startClusterNode(ctx, n, home) },
		wait: func(ctx context.Context) error {
			guess, err := r.waitForBroker(ctx, name, addr, int32(n))
			if err != nil {
				return err
			}
			r.logf("%s: up on %s (Apache Kafka %s; ApiVersions match %s)", name, addr, loggedKafkaVersion(r.cfg.logFile(name)), guess)
			return nil
		},
		stop: func(ctx context.Context) error { return r.stopPIDService(ctx, name) },
		kill: func(ctx context.Context) error { return r.killPIDService(ctx, name) },
		data: func(context.Context) []string { return []string{home} },
	}
}

// clusterNodeConfig is node n's server.properties: broker and controller,
// one of three voters of a static quorum, and the replication a
// production cluster has: every internal topic on three replicas, two of
// them in sync for a write, and the same for a topic created with the
// broker's defaults.
func clusterNodeConfig(c Config, n int, home string) string {
	var voters []string
	for i := 1; i <= clusterNodes; i++ {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i, c.ClusterControllerPort+i-1))
	}
	return fmt.Sprintf(`# Written by scripts/services.sh on every start; edits are lost.
# Node %[1]d of the three-node cluster of KAFKA_CLUSTER=1.
process.roles=broker,controller
node.id=%[1]d
controller.quorum.voters=%[2]s
listeners=PLAINTEXT://127.0.0.1:%[3]d,CONTROLLER://127.0.0.1:%[4]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[3]d
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%[5]s/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=true
offsets.topic.replication.factor=3
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
`, n, strings.Join(voters, ","), c.ClusterPort+n-1, c.ClusterControllerPort+n-1, home)
}

// clusterID returns the id the cluster's formatted nodes have, or a new one.
func (r *Runner) clusterID() (string, error) {
	for n := 1; n <= clusterNodes; n++ {
		b, err := os.ReadFile(filepath.Join(r.cfg.servicesDir(), nodeName(n), "data/meta.properties"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if id, ok := strings.CutPrefix(line, "cluster.id="); ok {
				return strings.TrimSpace(id), nil
			}
		}
	}
	return newClusterID()
}

func (r *Runner) startClusterNode(ctx context.Context, n int, home string) error {
	name := nodeName(n)
	if _, ok := r.runningPID(name); ok {
		r.logf("%s: already running", name)
		return nil
	}
	port, controller := r.cfg.ClusterPort+n-1, r.cfg.ClusterControllerPort+n-1
	if err := requireFreePort(ctx, name, port, "KAFKA_CLUSTER_PORT"); err != nil {
		return err
	}
	if err := requireFreePort(ctx, name, controller, "KAFKA_CLUSTER_CONTROLLER_PORT"); err != nil {
		return err
	}
	j := r.kafkaJars()
	version, dir, err := j.resolve(r.cfg.cacheDir())
	if err != nil {
		return err
	}
	if err := r.fetch(ctx, j, version, dir); err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	properties := filepath.Join(home, "server.properties")
	if err := writeFile(properties, []byte(clusterNodeConfig(r.cfg, n, home)), 0o644); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(home, "data/meta.properties")); err != nil {
		// Every node is formatted with the cluster's id; the voters are
		// static (controller.quorum.voters), so changing
		// KAFKA_CLUSTER_CONTROLLER_PORT later needs a clean of all three.
		r.logf("%s: formatting storage in %s/data", name, home)
		id, err := r.clusterID()
		if err != nil {
			return err
		}
		if err := r.format(ctx, name, dir, properties, id); err != nil {
			return err
		}
	}
	r.logf("%s: starting Kafka %s on 127.0.0.1:%d (controller 127.0.0.1:%d), node %d of %d", name, version, port, controller, n, clusterNodes)
	return r.launch(name, "", append(r.kafkaJava(dir), "kafka.Kafka", properties)...)
}
