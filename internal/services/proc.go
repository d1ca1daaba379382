package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Processes started from a pid file: the JVMs of Kafka and Neo4j, and the
// Qdrant servers. Their pid files are .services/run/NAME.pid.

func (r *Runner) pidFile(name string) string { return filepath.Join(r.cfg.runDir(), name+".pid") }

// runningPID returns the pid of the running service. The process must be
// alive and its command line must name this checkout's .services directory,
// so a pid that the system gave to another process since is never taken
// for it.
func (r *Runner) runningPID(name string) (int, bool) {
	b, err := os.ReadFile(r.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid) {
		return 0, false
	}
	if !strings.Contains(cmdline(pid), r.cfg.servicesDir()+"/") {
		return 0, false
	}
	return pid, true
}

// alive reports whether the process runs; an exited process that its parent
// has not reaped yet (a zombie) does not count.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if state, ok := strings.CutPrefix(line, "State:"); ok {
			return !strings.HasPrefix(strings.TrimSpace(state), "Z")
		}
	}
	return true
}

// cmdline returns the process's arguments joined by spaces, as ps prints them.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// rotateLog keeps the log of the previous run as FILE.1.
func rotateLog(file string) error {
	err := os.Rename(file, file+".1")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// launch starts argv in dir, in its own session, detached from this
// process (a Ctrl-C or a CI step ending does not stop it), with its output
// in the service's log, and writes its pid file. Nothing waits for it: the
// pid file is how later commands find it.
func (r *Runner) launch(name, dir string, argv ...string) error {
	logf := r.cfg.logFile(name)
	if err := rotateLog(logf); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	out, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start %s: %w", name, argv[0], err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Process.Release(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := os.WriteFile(r.pidFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	awaitArguments(pid)
	return nil
}

// argumentsWait bounds awaitArguments: far above the moment it takes,
// which only a loaded machine stretches.
const argumentsWait = 5 * time.Second

// awaitArguments waits until pid's command line can be read, or pid is
// gone. cmd.Start returns once the child's exec has begun, a moment before
// the kernel gives the new program its arguments: until then
// /proc/PID/cmdline reads empty, and runningPID, which knows a service by
// its command line, would say a service just started is not running (the
// ready wait then reported "the process exited").
func awaitArguments(pid int) {
	deadline := time.Now().Add(argumentsWait)
	for cmdline(pid) == "" && alive(pid) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// killPID sends SIGTERM, waits up to StopTimeout, then sends SIGKILL.
func (r *Runner) killPID(ctx context.Context, name string, pid int) {
	if syscall.Kill(pid, syscall.SIGTERM) == nil {
		r.awaitExit(ctx, name, pid)
	}
}

// awaitExit waits up to StopTimeout for a process told to stop, then
// sends SIGKILL.
func (r *Runner) awaitExit(ctx context.Context, name string, pid int) {
	if r.waitGone(ctx, pid, r.cfg.StopTimeout) {
		return
	}
	r.logf("%s: pid %d ignored SIGTERM for %s, sending SIGKILL", name, pid, seconds(r.cfg.StopTimeout))
	_ = syscall.Kill(pid, syscall.SIGKILL)
	r.waitGone(ctx, pid, 0)
}

// waitGone polls until pid is gone, for at most timeout (0: no limit but
// ctx), and reports whether it is.
func (r *Runner) waitGone(ctx context.Context, pid int, timeout time.Duration) bool {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(r.stopPoll)
	defer tick.Stop()
	for alive(pid) {
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return !alive(pid)
		case <-tick.C:
		}
	}
	return true
}

// stopPIDService stops a service started by launch, and removes its pid file.
func (r *Runner) stopPIDService(ctx context.Context, name string) error {
	return r.stopPIDServices(ctx, name)
}

// stopPIDServices stops services started by launch all at once: SIGTERM to
// each, then the wait for each (SIGKILL after StopTimeout), and removes
// their pid files.
func (r *Runner) stopPIDServices(ctx context.Context, names ...string) error {
	pids := make([]int, len(names))
	for i, name := range names {
		if pid, ok := r.runningPID(name); ok {
			r.logf("%s: stopping (pid %d)", name, pid)
			if syscall.Kill(pid, syscall.SIGTERM) == nil {
				pids[i] = pid
			}
		}
	}
	for i, name := range names {
		if pids[i] != 0 {
			r.awaitExit(ctx, name, pids[i])
		}
		if err := removeIfExists(r.pidFile(name)); err != nil {
			return err
		}
	}
	return nil
}

// killPIDService ends a service started by launch at once, with SIGKILL,
// as a crash would, and removes its pid file.
func (r *Runner) killPIDService(ctx context.Context, name string) error {
	if pid, ok := r.runningPID(name); ok {
		r.logf("%s: killing (pid %d, SIGKILL)", name, pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		r.waitGone(ctx, pid, 0)
	}
	return removeIfExists(r.pidFile(name))
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// waitUntil runs check every poll interval until it succeeds; it fails
// early, with the log, when up says the service's process is gone, and
// after timeout. Each check gets a context of its own that ends with ctx.
func (r *Runner) waitUntil(ctx context.Context, name, logf string, timeout time.Duration, up func(context.Context) bool, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		if check(ctx) == nil {
			return nil
		}
		if !up(ctx) {
			return &Failure{Service: name, Log: logf, Reason: "the process exited"}
		}
		if !time.Now().Before(deadline) {
			return &Failure{Service: name, Log: logf, Reason: "no answer after " + seconds(timeout)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.poll):
		}
	}
}

// seconds prints a duration as the script did: "30s".
func seconds(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) + "s" }

// portOpen reports whether something accepts TCP connections on 127.0.0.1:port.
func portOpen(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// requireFreePort fails if a foreign process holds the port; variable is
// the setting that moves the service elsewhere.
func requireFreePort(ctx context.Context, service string, port int, variable string) error {
	if !portOpen(port) {
		return nil
	}
	holder, _ := exec.CommandContext(ctx, "ss", "-Hltnp", fmt.Sprintf("sport = :%d", port)).Output()
	first, _, _ := strings.Cut(string(holder), "\n")
	return fmt.Errorf("%s: 127.0.0.1:%d is already taken by another process (%s); stop it or set %s", service, port, first, variable)
}

// leftovers returns the pids of service processes (java, postgres, qdrant)
// whose command line names one of dirs; none may survive down.
func leftovers(dirs []string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !serviceCommand(strings.TrimSpace(string(comm))) {
			continue
		}
		args := cmdline(pid)
		for _, d := range dirs {
			if strings.Contains(args, d) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// serviceCommand reports whether comm is the name of a service's process.
func serviceCommand(comm string) bool {
	return comm == "java" || comm == "postgres" || strings.HasPrefix(comm, "qdrant")
}
