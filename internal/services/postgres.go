package services

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PostgreSQL from Debian's packages: a cluster of this checkout's own, run
// as the postgres user (PostgreSQL refuses to run as root), with TLS on the
// same port and the role projector_tls that may connect over TLS only.

func (r *Runner) postgres() service {
	return service{
		name:  "postgres",
		addr:  func() string { return fmt.Sprintf("127.0.0.1:%d", r.cfg.PGPort) },
		up:    r.pgRunning,
		start: r.startPostgres,
		wait:  r.waitPostgres,
		stop:  r.stopPostgres,
		kill:  r.killPostgres,
		data:  func(ctx context.Context) []string { return []string{r.pgHome(ctx)} },
	}
}

// pgBin returns the newest installed server's bin directory (Debian keeps
// them versioned), if it has initdb.
func pgBin() (string, bool) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(dirs) == 0 {
		return "", false
	}
	slices.SortFunc(dirs, compareVersions)
	d := dirs[len(dirs)-1]
	if !executable(filepath.Join(d, "initdb")) {
		return "", false
	}
	return d, true
}

// compareVersions orders strings as sort -V does for version numbers: runs
// of digits compare as numbers, the rest byte by byte.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		switch {
		case da != "" && db != "":
			na, _ := strconv.ParseUint(da, 10, 64)
			nb, _ := strconv.ParseUint(db, 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			a, b = a[len(da):], b[len(db):]
		case a[0] != b[0]:
			if a[0] < b[0] {
				return -1
			}
			return 1
		default:
			a, b = a[1:], b[1:]
		}
	}
	return len(a) - len(b)
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// pgHome is where the cluster lives. The postgres user must be able to
// reach its directory; a checkout under a private directory (/root, say)
// gets a per-checkout directory in /var/lib instead.
func (r *Runner) pgHome(ctx context.Context) string {
	if _, err := user.Lookup("postgres"); err == nil &&
		exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", "test", "-x", r.cfg.Root).Run() == nil {
		return filepath.Join(r.cfg.servicesDir(), "postgres")
	}
	return fmt.Sprintf("/var/lib/postgresql/projector-%d", cksum([]byte(r.cfg.Root)))
}

// pgSocketDir is the cluster's Unix socket directory, for the superuser's
// peer login. A socket path is limited to 107 bytes, so a deep checkout
// uses /tmp.
func (r *Runner) pgSocketDir(ctx context.Context) string {
	dir := r.pgHome(ctx) + "/run"
	if len(dir) > 80 {
		dir = fmt.Sprintf("/tmp/projector-pg-%d", cksum([]byte(r.cfg.Root)))
	}
	return dir
}

// asPostgres returns argv run as the postgres user, from a directory it can read.
func asPostgres(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--"}, argv...)...)
	cmd.Dir = "/"
	return cmd
}

// postgresIDs returns the uid and gid of the postgres user and group.
func postgresIDs() (int, int, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, err
	}
	g, err := user.LookupGroup("postgres")
	if err != nil {
		return 0, 0, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return 0, 0, err
	}
	gid, err := strconv.Atoi(g.Gid)
	return uid, gid, err
}

func (r *Runner) pgRunning(ctx context.Context) bool {
	bin, ok := pgBin()
	if !ok {
		return false
	}
	return asPostgres(ctx, bin+"/pg_ctl", "status", "-D", r.pgHome(ctx)+"/data").Run() == nil
}

// psql returns a psql of the superuser over the cluster's own Unix socket.
func (r *Runner) psql(ctx context.Context, args ...string) *exec.Cmd {
	bin, _ := pgBin()
	return asPostgres(ctx, append([]string{bin + "/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", r.pgSocketDir(ctx), "-p", strconv.Itoa(r.cfg.PGPort), "-d", "postgres", "-tA"}, args...)...)
}

// query runs one statement and returns its output; psql's errors go to stderr.
func (r *Runner) query(ctx context.Context, stderr io.Writer, sql string) (string, error) {
	cmd := r.psql(ctx, "-c", sql)
	cmd.Stderr = stderr
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// logged runs cmd with its output appended to the file logf.
func logged(cmd *exec.Cmd, logf string) error {
	f, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

// overwritten runs cmd with its output in the file logf, written afresh.
func overwritten(cmd *exec.Cmd, logf string) error {
	if err := removeIfExists(logf); err != nil {
		return err
	}
	return logged(cmd, logf)
}

func (r *Runner) installPostgres(ctx context.Context) error {
	if _, ok := pgBin(); ok {
		return nil
	}
	r.logf("postgres: installing Debian's postgresql package")
	logf := filepath.Join(r.cfg.logDir(), "apt-postgres.log")
	if err := r.aptInstall(ctx, logf, true, "postgresql"); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "apt-get install postgresql failed"}
	}
	// The package creates and may start a "main" cluster on 5432; ours replaces it.
	if bin, ok := pgBin(); ok {
		_ = exec.CommandContext(ctx, "pg_ctlcluster", filepath.Base(filepath.Dir(bin)), "main", "stop").Run()
	}
	return nil
}

// aptInstall installs Debian packages, after apt-get update when update is
// set, with the output in logf.
func (r *Runner) aptInstall(ctx context.Context, logf string, update bool, packages ...string) error {
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := removeIfExists(logf); err != nil {
		return err
	}
	if update {
		cmd := exec.CommandContext(ctx, "apt-get", "update", "-q")
		cmd.Env = env
		if err := logged(cmd, logf); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-q"}, packages...)...)
	cmd.Env = env
	return logged(cmd, logf)
}

func (r *Runner) startPostgres(ctx context.Context) error {
	if err := r.installPostgres(ctx); err != nil {
		return err
	}
	bin, ok := pgBin()
	if !ok {
		return fmt.Errorf("postgres: no server with initdb in /usr/lib/postgresql/*/bin")
	}
	home, sock, logf := r.pgHome(ctx), r.pgSocketDir(ctx), r.cfg.logFile("postgres")
	if r.pgRunning(ctx) {
		r.logf("postgres: already running")
		return nil
	}
	if err := requireFreePort(ctx, "postgres", r.cfg.PGPort, "PG_PORT"); err != nil {
		return err
	}
	uid, gid, err := postgresIDs()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	for _, d := range []string{home, sock} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	if _, err := os.Stat(home + "/data/PG_VERSION"); err != nil {
		r.logf("postgres: creating a cluster in %s/data", home)
		initLog := filepath.Join(r.cfg.logDir(), "initdb.log")
		if err := overwritten(asPostgres(ctx, bin+"/initdb", "-D", home+"/data", "-U", "postgres", "-E", "UTF8",
			"--locale=C.UTF-8", "--auth-local=peer", "--auth-host=scram-sha-256"), initLog); err != nil {
			return &Failure{Service: "postgres", Log: initLog, Reason: "initdb failed"}
		}
	}
	if err := rotateLog(logf); err != nil {
		return err
	}
	// The server inherits this file for its log (no -l), so the log can
	// live in .services/logs even when the postgres user may not write there.
	r.logf("postgres: starting on 127.0.0.1:%d", r.cfg.PGPort)
	start := asPostgres(ctx, bin+"/pg_ctl", "start", "-D", home+"/data", "-w", "-t", strconv.Itoa(int(r.cfg.StartTimeoutPostgres.Seconds())),
		"-o", fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s'", r.cfg.PGPort, sock))
	if err := logged(start, logf); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "pg_ctl start failed"}
	}
	return nil
}

func (r *Runner) waitPostgres(ctx context.Context) error {
	bin, _ := pgBin()
	logf := r.cfg.logFile("postgres")
	if err := r.waitUntil(ctx, "postgres", logf, r.cfg.StartTimeoutPostgres, r.pgRunning, func(ctx context.Context) error {
		return exec.CommandContext(ctx, bin+"/pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(r.cfg.PGPort)).Run()
	}); err != nil {
		return err
	}
	// The application's role (CREATEDB, so tests may make databases of their
	// own) and database; running again resets the password and changes
	// nothing else.
	if err := logged(r.psql(ctx, "-c", `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'projector') THEN
			CREATE ROLE projector LOGIN CREATEDB PASSWORD 'projector';
		ELSE
			ALTER ROLE projector LOGIN CREATEDB PASSWORD 'projector';
		END IF; END $$`), logf); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "cannot create role projector"}
	}
	if exists, _ := r.query(ctx, r.stderr, "SELECT 1 FROM pg_database WHERE datname = 'projector'"); exists == "" {
		if err := logged(r.psql(ctx, "-c", "CREATE DATABASE projector OWNER projector"), logf); err != nil {
			return &Failure{Service: "postgres", Log: logf, Reason: "cannot create database projector"}
		}
	}
	if err := r.securePostgres(ctx); err != nil {
		return err
	}
	version, _ := r.query(ctx, r.stderr, "SELECT version()")
	version, _, _ = strings.Cut(version, ",")
	r.logf("postgres: up on 127.0.0.1:%d (%s; TLS on, role projector_tls TLS only)", r.cfg.PGPort, version)
	return nil
}

// securePostgres turns TLS on with the dev certificate and makes the role
// projector_tls, which may log in only over TLS (hostssl), with a password
// from a passfile. All of it takes effect on a reload, so a running
// cluster is secured without a restart; connections without TLS
// (PROJECTOR_POSTGRES_DSN) keep working for other roles.
func (r *Runner) securePostgres(ctx context.Context) error {
	home, logf := r.pgHome(ctx), r.cfg.logFile("postgres")
	tls, hba := home+"/tls", home+"/data/pg_hba.conf"
	pw, err := r.secret("postgres-password")
	if err != nil {
		return err
	}
	// The server reads its key as the postgres user, from its own directory.
	uid, gid, err := postgresIDs()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := install(tls, nil, uid, gid, 0o700|os.ModeDir); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"server.key", 0o600}, {"server.crt", 0o644}} {
		b, err := os.ReadFile(filepath.Join(r.cfg.tlsDir(), f.name))
		if err != nil {
			return err
		}
		if err := install(filepath.Join(tls, f.name), b, uid, gid, f.mode); err != nil {
			return err
		}
	}
	// The password goes through standard input, never a command line.
	sql := r.psql(ctx)
	sql.Stdin = strings.NewReader(secureSQL(tls, pw))
	if err := logged(sql, logf); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "cannot set up TLS and the role projector_tls"}
	}
	if err := prependTLSRules(hba); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "cannot add the hostssl rule to " + hba}
	}
	if err := logged(r.psql(ctx, "-c", "SELECT pg_reload_conf()"), logf); err != nil {
		return &Failure{Service: "postgres", Log: logf, Reason: "cannot reload the configuration"}
	}
	pgpass := fmt.Sprintf("127.0.0.1:%[1]d:projector:projector_tls:%[2]s\nlocalhost:%[1]d:projector:projector_tls:%[2]s\n", r.cfg.PGPort, pw)
	if err := writeFile(filepath.Join(r.cfg.secretsDir(), "pgpass"), []byte(pgpass), 0o600); err != nil {
		return err
	}
	// A reload is asynchronous: wait until new sessions see TLS on.
	return r.waitUntil(ctx, "postgres", logf, 10*time.Second, r.pgRunning, func(ctx context.Context) error {
		if on, err := r.query(ctx, io.Discard, "SHOW ssl"); err != nil || on != "on" {
			return fmt.Errorf("ssl is %q", on)
		}
		return nil
	})
}

// secureSQL turns TLS on with the certificate in tls and gives the role
// projector_tls the password pw.
func secureSQL(tls, pw string) string {
	return fmt.Sprintf(`ALTER SYSTEM SET ssl = on;
ALTER SYSTEM SET ssl_cert_file = '%[1]s/server.crt';
ALTER SYSTEM SET ssl_key_file = '%[1]s/server.key';
DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'projector_tls') THEN
		CREATE ROLE projector_tls LOGIN;
	END IF; END $$;
ALTER ROLE projector_tls LOGIN PASSWORD '%[2]s';
GRANT CONNECT, CREATE ON DATABASE projector TO projector_tls;
`, tls, pw)
}

// tlsRules go above initdb's "host all all" lines: the first match wins.
const tlsRules = `# projector_tls (scripts/services.sh): over TLS only, with a password
hostssl projector projector_tls 127.0.0.1/32 scram-sha-256
hostnossl all projector_tls all reject
`

// withTLSRules returns pg_hba.conf's content with tlsRules on top, once.
func withTLSRules(hba string) (string, bool) {
	for _, line := range strings.Split(hba, "\n") {
		if strings.HasPrefix(line, "# projector_tls") {
			return hba, false
		}
	}
	return tlsRules + hba, true
}

// prependTLSRules puts tlsRules on top of the file hba, keeping its owner and mode.
func prependTLSRules(hba string) error {
	b, err := os.ReadFile(hba)
	if err != nil {
		return err
	}
	content, changed := withTLSRules(string(b))
	if !changed {
		return nil
	}
	st, err := os.Stat(hba)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if err := install(hba+".new", []byte(content), int(sys.Uid), int(sys.Gid), st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(hba+".new", hba)
}

// install writes data to path (or makes the directory path, when mode is
// a directory's) owned by uid:gid with mode, as install(1) does.
func install(path string, data []byte, uid, gid int, mode os.FileMode) error {
	if mode.IsDir() {
		if err := os.MkdirAll(path, mode.Perm()); err != nil {
			return err
		}
	} else if err := os.WriteFile(path, data, mode.Perm()); err != nil {
		return err
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, mode.Perm())
}

func (r *Runner) stopPostgres(ctx context.Context) error {
	if !r.pgRunning(ctx) {
		return nil
	}
	bin, _ := pgBin()
	data := r.pgHome(ctx) + "/data"
	r.logf("postgres: stopping")
	// fast: roll back open transactions and disconnect clients, then a clean shutdown.
	if asPostgres(ctx, bin+"/pg_ctl", "stop", "-D", data, "-m", "fast", "-w", "-t", strconv.Itoa(int(r.cfg.StopTimeout.Seconds()))).Run() != nil {
		_ = asPostgres(ctx, bin+"/pg_ctl", "stop", "-D", data, "-m", "immediate", "-w").Run()
	}
	return nil
}

// killPostgres stops the server with no shutdown at all, as a crash would:
// the next start recovers from the write-ahead log.
func (r *Runner) killPostgres(ctx context.Context) error {
	if !r.pgRunning(ctx) {
		return nil
	}
	bin, _ := pgBin()
	r.logf("postgres: stopping at once (pg_ctl stop -m immediate)")
	_ = asPostgres(ctx, bin+"/pg_ctl", "stop", "-D", r.pgHome(ctx)+"/data", "-m", "immediate", "-w").Run()
	return nil
}
