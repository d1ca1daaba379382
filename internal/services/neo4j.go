package services

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"
)

// The Neo4j Community engine, from the jars of scripts/neo4j/pom.xml, run
// embedded by scripts/neo4j/Main.java with Bolt on 127.0.0.1; the same JVM
// runs a second, small database with authentication on and Bolt over TLS
// only.

func (r *Runner) neo4j() service {
	home := filepath.Join(r.cfg.servicesDir(), "neo4j")
	secureHome := filepath.Join(r.cfg.servicesDir(), "neo4j-secure")
	return service{
		name:  "neo4j",
		addr:  func() string { return fmt.Sprintf("127.0.0.1:%d", r.cfg.Neo4jBoltPort) },
		up:    r.pidUp("neo4j"),
		start: func(ctx context.Context) error { return r.startNeo4j(ctx, home, secureHome) },
		wait:  r.waitNeo4j,
		stop:  func(ctx context.Context) error { return r.stopPIDService(ctx, "neo4j") },
		kill:  func(ctx context.Context) error { return r.killPIDService(ctx, "neo4j") },
		data:  func(context.Context) []string { return []string{home, secureHome} },
	}
}

func (r *Runner) startNeo4j(ctx context.Context, home, secureHome string) error {
	j := jars{name: "neo4j", pom: filepath.Join(r.cfg.Root, "scripts/neo4j/pom.xml"), property: "neo4j.version", version: r.cfg.Neo4jVersion}
	version, dir, err := j.resolve(r.cfg.cacheDir())
	if err != nil {
		return err
	}
	if pid, ok := r.runningPID("neo4j"); ok {
		if strings.Contains(cmdline(pid), secureHome) {
			r.logf("neo4j: already running")
			return nil
		}
		r.logf("neo4j: running without the secured instance (started by an older scripts/services.sh); restarting it")
		if err := r.stopPIDService(ctx, "neo4j"); err != nil {
			return err
		}
	}
	if err := requireFreePort(ctx, "neo4j", r.cfg.Neo4jBoltPort, "NEO4J_BOLT_PORT"); err != nil {
		return err
	}
	if err := requireFreePort(ctx, "neo4j", r.cfg.Neo4jSecureBoltPort, "NEO4J_SECURE_BOLT_PORT"); err != nil {
		return err
	}
	if err := r.fetch(ctx, j, version, dir); err != nil {
		return err
	}
	if err := r.compileMain(ctx, dir); err != nil {
		return err
	}
	for _, d := range []string{home, secureHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if _, err := r.secret("neo4j-password"); err != nil {
		return err
	}
	r.logf("neo4j: starting Neo4j %s with Bolt on 127.0.0.1:%d (and over TLS, with authentication, on 127.0.0.1:%d)",
		version, r.cfg.Neo4jBoltPort, r.cfg.Neo4jSecureBoltPort)
	// The --add-opens flags are those Neo4j's own launcher passes on Java 17.
	argv := append([]string{r.cfg.Java}, r.cfg.Neo4jHeap...)
	argv = append(argv, "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow",
		"--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
		"--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "-Dio.netty.tryReflectionSetAccessible=true",
		"-cp", dir+"/lib/*:"+dir+"/classes", "Main", home, strconv.Itoa(r.cfg.Neo4jBoltPort),
		secureHome, strconv.Itoa(r.cfg.Neo4jSecureBoltPort), r.cfg.tlsDir(), filepath.Join(r.cfg.secretsDir(), "neo4j-password"))
	return r.launch("neo4j", "", argv...)
}

// compileMain compiles scripts/neo4j/Main.java into dir/classes when the
// class is missing or older than its source.
func (r *Runner) compileMain(ctx context.Context, dir string) error {
	src := filepath.Join(r.cfg.Root, "scripts/neo4j/Main.java")
	class := filepath.Join(dir, "classes/Main.class")
	s, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("neo4j: %w", err)
	}
	if c, err := os.Stat(class); err == nil && !s.ModTime().After(c.ModTime()) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(class), 0o755); err != nil {
		return err
	}
	logf := filepath.Join(r.cfg.logDir(), "neo4j-javac.log")
	if err := overwritten(exec.CommandContext(ctx, "javac", "-d", filepath.Dir(class), "-cp", dir+"/lib/*", src), logf); err != nil {
		return &Failure{Service: "neo4j", Log: logf, Reason: "javac scripts/neo4j/Main.java failed"}
	}
	return nil
}

func (r *Runner) waitNeo4j(ctx context.Context) error {
	logf := r.cfg.logFile("neo4j")
	up := r.pidUp("neo4j")
	probe := func(uri string, auth neo4j.AuthToken, roots *x509.CertPool) (string, error) {
		var version string
		err := r.waitUntil(ctx, "neo4j", logf, r.cfg.StartTimeoutNeo4j, up, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var err error
			version, err = probeNeo4j(ctx, uri, auth, roots)
			return err
		})
		return version, err
	}
	uri := fmt.Sprintf("bolt://127.0.0.1:%d", r.cfg.Neo4jBoltPort)
	version, err := probe(uri, neo4j.NoAuth(), nil)
	if err != nil {
		return err
	}
	r.logf("neo4j: up on %s (%s)", uri, version)
	// Bolt opens before Main has set the password: a probe then would fail
	// to log in, and three failures lock the user for 5 s. Wait for Main's
	// ready line.
	ready := regexp.MustCompile(`(?m)^neo4j: ready: .*bolt over TLS`)
	if err := r.waitUntil(ctx, "neo4j", logf, r.cfg.StartTimeoutNeo4j, up, func(context.Context) error {
		if b, err := os.ReadFile(logf); err != nil || !ready.Match(b) {
			return errors.New("not ready yet")
		}
		return nil
	}); err != nil {
		return err
	}
	password, err := r.secret("neo4j-password")
	if err != nil {
		return err
	}
	roots, err := readCA(filepath.Join(r.cfg.tlsDir(), "ca.crt"))
	if err != nil {
		return err
	}
	secure := fmt.Sprintf("bolt+s://127.0.0.1:%d", r.cfg.Neo4jSecureBoltPort)
	version, err = probe(secure, neo4j.BasicAuth("neo4j", password, ""), roots)
	if err != nil {
		return err
	}
	r.logf("neo4j: up on %s, authentication on (%s)", secure, version)
	return nil
}

// readCA returns a pool of the certificates in the PEM file path.
func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// probeNeo4j runs a real query over Bolt and returns the name, version and
// edition from dbms.components(), e.g. "Neo4j Kernel 5.26.30 community".
// roots, when set, are the CAs to trust for a bolt+s:// URI.
func probeNeo4j(ctx context.Context, uri string, auth neo4j.AuthToken, roots *x509.CertPool) (string, error) {
	driver, err := neo4j.NewDriverWithContext(uri, auth, func(c *config.Config) {
		if roots != nil {
			c.TlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		}
	})
	if err != nil {
		return "", fmt.Errorf("new driver: %w", err)
	}
	defer driver.Close(ctx)
	res, err := neo4j.ExecuteQuery(ctx, driver, "RETURN 1 AS one", nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("return 1: %w", err)
	}
	if len(res.Records) != 1 {
		return "", fmt.Errorf("return 1: got %d records, want 1", len(res.Records))
	}
	res, err = neo4j.ExecuteQuery(ctx, driver,
		"CALL dbms.components() YIELD name, versions, edition RETURN name + ' ' + versions[0] + ' ' + edition AS v",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("dbms.components: %w", err)
	}
	if len(res.Records) == 0 {
		return "", errors.New("dbms.components returned no record")
	}
	v, _ := res.Records[0].Get("v")
	return fmt.Sprint(v), nil
}
