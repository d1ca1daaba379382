// Package services runs the real services that projector's integration
// tests and local runs need, natively (no Docker), bound to 127.0.0.1 only:
// PostgreSQL from Debian's packages, Apache Kafka and Neo4j from jars of
// Maven Central, and Qdrant's engine behind qdrant-engine/. It is the work
// of scripts/services.sh, which builds cmd/services and calls it; the
// header of that script is the user's documentation.
//
// Each service is one row of a table (Runner.table): how it starts, how to
// wait until it answers (and print its version), how it stops and how it is
// killed. The commands (up, down, status, env, clean, start, stop, restart,
// kill) only walk that table.
package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Runner runs the commands of scripts/services.sh for one checkout.
type Runner struct {
	cfg    Config
	stdout io.Writer // what a command prints: status, env
	stderr io.Writer // progress, as "services: ..." lines
	// poll is how often a wait asks a starting service again; stopPoll how
	// often a stop looks whether the process is gone.
	poll, stopPoll time.Duration
	table          []service
}

// service is one row of the table.
type service struct {
	name string
	// optIn services (the cluster's nodes) are not in the default set
	// unless KAFKA_CLUSTER asks for them; named, they always work.
	optIn bool
	// quorum services (the cluster's nodes) are started by launch and
	// stopped together: each one's clean shutdown needs a majority of
	// them running, which stopping them one after the other would take
	// from the last (it would wait for SIGKILL).
	quorum bool
	addr   func() string
	up     func(ctx context.Context) bool
	// start launches the service, or says it runs already; it does not
	// wait, so the JVMs start side by side.
	start func(ctx context.Context) error
	// wait returns once the service answers, after the set-up that needs it
	// running (roles, users), and prints its version.
	wait func(ctx context.Context) error
	// stop asks the service to end (SIGTERM, SIGKILL after StopTimeout).
	stop func(ctx context.Context) error
	// kill ends it at once, as a crash would.
	kill func(ctx context.Context) error
	// data are the directories clean removes, beside its log.
	data func(ctx context.Context) []string
}

// New returns a Runner that prints to stdout and stderr.
func New(cfg Config, stdout, stderr io.Writer) *Runner {
	r := &Runner{cfg: cfg, stdout: stdout, stderr: stderr, poll: 500 * time.Millisecond, stopPoll: 100 * time.Millisecond}
	r.table = []service{r.postgres(), r.kafka()}
	for n := 1; n <= clusterNodes; n++ {
		r.table = append(r.table, r.clusterNode(n))
	}
	r.table = append(r.table, r.neo4j(), r.qdrant())
	return r
}

// ErrDown is returned by status when a service is down; it prints nothing more.
var ErrDown = errors.New("a service is down")

// Failure is a service that did not come up; Report prints it with the end
// of the service's log.
type Failure struct {
	Service, Log, Reason string
}

func (f *Failure) Error() string { return f.Service + " did not come up: " + f.Reason }

// Report prints err as the script's messages went, to stderr, and returns
// the exit status.
func Report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrDown) {
		return 1
	}
	fmt.Fprintf(stderr, "services: error: %v\n", err)
	var f *Failure
	if errors.As(err, &f) && f.Log != "" {
		if lines, err := tail(f.Log, 30); err == nil {
			fmt.Fprintf(stderr, "services: last 30 lines of %s:\n", f.Log)
			for _, l := range lines {
				fmt.Fprintln(stderr, l)
			}
		}
	}
	return 1
}

// tail returns the last n lines of a file, reading at most its last MiB.
func tail(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const most = 1 << 20
	if st, err := f.Stat(); err == nil && st.Size() > most {
		if _, err := f.Seek(-most, io.SeekEnd); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(b) == 0 {
		lines = nil
	}
	return lines[max(0, len(lines)-n):], nil
}

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "services: "+format+"\n", args...)
}

// defaults are the services up, status and clean take without names.
func (r *Runner) defaults() []string {
	var names []string
	for _, s := range r.table {
		if !s.optIn || r.cfg.Cluster {
			names = append(names, s.name)
		}
	}
	return names
}

func (r *Runner) lookup(name string) (service, bool) {
	for _, s := range r.table {
		if s.name == name {
			return s, true
		}
	}
	return service{}, false
}

// inOrder returns the named services in start order (postgres first).
func (r *Runner) inOrder(names []string) []service {
	var out []service
	for _, s := range r.table {
		if slices.Contains(names, s.name) {
			out = append(out, s)
		}
	}
	return out
}

func reversed(s []service) []service {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// Run runs one command: prog is the name the script was called by, for
// the usage line; args are the command and its service names.
func (r *Runner) Run(ctx context.Context, prog string, args []string) error {
	all := strings.Join(r.defaults(), " ")
	if len(args) == 0 {
		return fmt.Errorf("usage: %s up|down|status|env|clean [SERVICE...] | start|stop|restart|kill SERVICE...", prog)
	}
	cmd, named := args[0], args[1:]
	if slices.Contains([]string{"start", "stop", "restart", "kill"}, cmd) && len(named) == 0 {
		return fmt.Errorf("%s needs a service name (one of: %s)", cmd, all)
	}
	// The services named on the command line, else those in SERVICES.
	names := named
	if len(names) == 0 {
		names = r.cfg.Services
	}
	if len(names) == 0 {
		names = r.defaults()
	}
	for _, n := range names {
		if _, ok := r.lookup(n); !ok {
			return fmt.Errorf("unknown service '%s' (one of: %s)", n, all)
		}
	}
	switch cmd {
	case "up", "start":
		return r.start(ctx, names)
	case "down":
		if len(named) > 0 {
			return r.stop(ctx, named)
		}
		return r.down(ctx)
	case "status":
		return r.status(ctx, names)
	case "env":
		return r.env()
	case "clean":
		return r.clean(ctx, names)
	case "stop":
		return r.stop(ctx, names)
	case "restart":
		if err := r.stop(ctx, names); err != nil {
			return err
		}
		return r.start(ctx, names)
	case "kill":
		for _, s := range reversed(r.inOrder(names)) {
			if err := s.kill(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command '%s'", cmd)
}

// start launches the services (the JVMs start side by side), then waits
// for each in turn.
func (r *Runner) start(ctx context.Context, names []string) error {
	for _, d := range []string{r.cfg.logDir(), r.cfg.runDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := r.ensureTLS(); err != nil {
		return err
	}
	svcs := r.inOrder(names)
	for _, s := range svcs {
		if err := s.start(ctx); err != nil {
			return err
		}
	}
	for _, s := range svcs {
		if err := s.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stop stops the services, last started first; the nodes of the quorum
// among them all at once, where the first of them stands.
func (r *Runner) stop(ctx context.Context, names []string) error {
	svcs := reversed(r.inOrder(names))
	var nodes []string
	for _, s := range svcs {
		if s.quorum {
			nodes = append(nodes, s.name)
		}
	}
	for _, s := range svcs {
		var err error
		switch {
		case !s.quorum:
			err = s.stop(ctx)
		case s.name == nodes[0]:
			err = r.stopPIDServices(ctx, nodes...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// everything are the names of the whole table, the cluster's nodes too, so
// that down and a full clean leave nothing running whatever KAFKA_CLUSTER says.
func (r *Runner) everything() []string {
	names := make([]string, len(r.table))
	for i, s := range r.table {
		names[i] = s.name
	}
	return names
}

// down stops every service, then any process of theirs that lost its pid file.
func (r *Runner) down(ctx context.Context) error {
	if err := r.stop(ctx, r.everything()); err != nil {
		return err
	}
	dirs := []string{r.cfg.servicesDir() + "/", r.cfg.cacheDir() + "/", r.pgHome(ctx) + "/"}
	for _, pid := range leftovers(dirs) {
		args := cmdline(pid)
		r.logf("stopping left-over process %d: %s", pid, args[:min(len(args), 120)])
		r.killPID(ctx, "left-over", pid)
	}
	if left := leftovers(dirs); len(left) > 0 {
		var b strings.Builder
		for _, pid := range left {
			fmt.Fprintf(&b, "%d ", pid)
		}
		return fmt.Errorf("processes still running: %s", b.String())
	}
	r.logf("down")
	return nil
}

// status prints each service up or down with its address.
func (r *Runner) status(ctx context.Context, names []string) error {
	var err error
	for _, n := range names {
		s, _ := r.lookup(n)
		state := "up  "
		if !s.up(ctx) {
			state, err = "down", ErrDown
		}
		fmt.Fprintf(r.stdout, "%-9s %s  %s\n", s.name, state, s.addr())
	}
	return err
}

// clean stops the services, then deletes their data (not the downloads of
// .cache); with every default service, all of .services.
func (r *Runner) clean(ctx context.Context, names []string) error {
	if slices.Equal(names, r.defaults()) {
		if err := r.stop(ctx, r.everything()); err != nil {
			return err
		}
		for _, d := range []string{r.pgHome(ctx), r.cfg.servicesDir()} {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		r.logf("removed %s", r.cfg.servicesDir())
		return nil
	}
	if err := r.stop(ctx, names); err != nil {
		return err
	}
	for _, n := range names {
		s, _ := r.lookup(n)
		for _, d := range s.data(ctx) {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		logf := r.cfg.logFile(n)
		if err := errors.Join(removeIfExists(logf), removeIfExists(logf+".1")); err != nil {
			return err
		}
	}
	r.logf("removed the data of: %s", strings.Join(names, " "))
	return nil
}

// env prints the export lines that eval "$(scripts/services.sh env)" reads.
func (r *Runner) env() error {
	qdrantBin, err := r.qdrantBinPath()
	if err != nil {
		return err
	}
	_, err = io.WriteString(r.stdout, envLines(r.cfg, qdrantBin))
	return err
}

// envLines renders the export lines; qdrantBin is the server the tests'
// private Qdrant servers run.
func envLines(c Config, qdrantBin string) string {
	tls, secrets := c.tlsDir(), c.secretsDir()
	qdrant := c.QdrantAddr
	if qdrant == "" {
		qdrant = fmt.Sprintf("127.0.0.1:%d", c.QdrantGRPCPort)
	}
	vars := [][2]string{
		{"PROJECTOR_BROKERS", fmt.Sprintf("127.0.0.1:%d", c.KafkaPort)},
		{"PROJECTOR_POSTGRES_DSN", fmt.Sprintf("postgres://projector:projector@127.0.0.1:%d/projector?sslmode=disable", c.PGPort)},
		{"PROJECTOR_NEO4J_URI", fmt.Sprintf("bolt://127.0.0.1:%d", c.Neo4jBoltPort)},
		{"PROJECTOR_NEO4J_USER", "neo4j"},
		{"PROJECTOR_NEO4J_PASSWORD", ""},
		{"PROJECTOR_QDRANT_ADDR", qdrant},
		{"PROJECTOR_SECURE_CA_FILE", tls + "/ca.crt"},
		{"PROJECTOR_SECURE_BROKERS", fmt.Sprintf("127.0.0.1:%d", c.KafkaSecurePort)},
		{"PROJECTOR_SECURE_KAFKA_USER", "projector"},
		{"PROJECTOR_SECURE_KAFKA_PASSWORD_FILE", secrets + "/kafka-password"},
		{"PROJECTOR_SECURE_POSTGRES_DSN", fmt.Sprintf("postgres://projector_tls@127.0.0.1:%d/projector?sslmode=verify-full&sslrootcert=%s/ca.crt&passfile=%s/pgpass", c.PGPort, tls, secrets)},
		{"PROJECTOR_SECURE_POSTGRES_PASSWORD_FILE", secrets + "/postgres-password"},
		{"PROJECTOR_SECURE_NEO4J_URI", fmt.Sprintf("bolt+s://127.0.0.1:%d", c.Neo4jSecureBoltPort)},
		{"PROJECTOR_SECURE_NEO4J_USER", "neo4j"},
		{"PROJECTOR_SECURE_NEO4J_PASSWORD_FILE", secrets + "/neo4j-password"},
		{"PROJECTOR_SECURE_QDRANT_ADDR", fmt.Sprintf("127.0.0.1:%d", c.QdrantSecureGRPCPort)},
		{"PROJECTOR_SECURE_QDRANT_API_KEY_FILE", secrets + "/qdrant-api-key"},
		{"PROJECTOR_TEST_QDRANT_BIN", qdrantBin},
		{"PROJECTOR_TEST_QDRANT_ENGINE_TARGET", c.QdrantEngineCache + "/target"},
	}
	if c.Cluster {
		// PROJECTOR_TEST_: a variable of the tests, which the projector's
		// check for misspelt PROJECTOR_* settings leaves alone.
		vars = append(vars, [2]string{"PROJECTOR_TEST_CLUSTER_BROKERS", strings.Join(c.clusterBrokers(), ",")})
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s='%s'\n", v[0], v[1])
	}
	return b.String()
}
