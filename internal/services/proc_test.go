package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newTestRunner returns a Runner on a checkout of its own in a temporary
// directory, with short waits, and its output.
func newTestRunner(t *testing.T) (*Runner, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cfg, err := ConfigFromEnv(t.TempDir(), environ())
	if err != nil {
		t.Fatal(err)
	}
	cfg.StopTimeout = time.Second
	var stdout, stderr bytes.Buffer
	r := New(cfg, &stdout, &stderr)
	r.poll, r.stopPoll = 20*time.Millisecond, 10*time.Millisecond
	for _, d := range []string{cfg.logDir(), cfg.runDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r, &stdout, &stderr
}

// launchFake launches a shell as the service name, running script; its
// command line names the checkout's .services, as a real service's does.
func launchFake(t *testing.T, r *Runner, name, script string) int {
	t.Helper()
	if err := r.launch(name, "", "sh", "-c", script+"; : "+r.cfg.servicesDir()+"/"); err != nil {
		t.Fatal(err)
	}
	pid, ok := r.runningPID(name)
	if !ok {
		t.Fatalf("%s: not running after launch", name)
	}
	t.Cleanup(func() {
		_ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run()
	})
	return pid
}

func TestLaunchAndStop(t *testing.T) {
	r, _, stderr := newTestRunner(t)
	pid := launchFake(t, r, "fake", "echo started; while :; do sleep 0.05; done")
	waitFor(t, func() bool { b, _ := os.ReadFile(r.cfg.logFile("fake")); return string(b) == "started\n" })
	if b, _ := os.ReadFile(r.pidFile("fake")); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Errorf("pid file holds %q, want %d", b, pid)
	}
	if err := r.stopPIDService(context.Background(), "fake"); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("pid %d alive after stop", pid)
	}
	if _, err := os.Stat(r.pidFile("fake")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left after stop: %v", err)
	}
	if want := "services: fake: stopping (pid " + strconv.Itoa(pid) + ")\n"; stderr.String() != want {
		t.Errorf("stop said %q, want %q", stderr.String(), want)
	}
	// A second start keeps the first log as .1.
	launchFake(t, r, "fake", "echo again; while :; do sleep 0.05; done")
	waitFor(t, func() bool { b, _ := os.ReadFile(r.cfg.logFile("fake")); return string(b) == "again\n" })
	if b, _ := os.ReadFile(r.cfg.logFile("fake") + ".1"); string(b) != "started\n" {
		t.Errorf("previous log %q, want the first run's", b)
	}
}

func TestStopSendsSIGKILLAfterStopTimeout(t *testing.T) {
	r, _, stderr := newTestRunner(t)
	pid := launchFake(t, r, "stubborn", "trap '' TERM; echo ready; while :; do sleep 0.05; done")
	waitFor(t, func() bool { b, _ := os.ReadFile(r.cfg.logFile("stubborn")); return string(b) == "ready\n" })
	start := time.Now()
	if err := r.stopPIDService(context.Background(), "stubborn"); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("pid %d alive after stop", pid)
	}
	if took := time.Since(start); took < r.cfg.StopTimeout {
		t.Errorf("stop took %s, want the StopTimeout of %s before SIGKILL", took, r.cfg.StopTimeout)
	}
	if !strings.Contains(stderr.String(), "stubborn: pid "+strconv.Itoa(pid)+" ignored SIGTERM for 1s, sending SIGKILL") {
		t.Errorf("stop said %q, want it to name the SIGKILL", stderr.String())
	}
}

func TestKillIsImmediate(t *testing.T) {
	r, _, stderr := newTestRunner(t)
	pid := launchFake(t, r, "broker", "trap '' TERM; while :; do sleep 0.05; done")
	start := time.Now()
	if err := r.killPIDService(context.Background(), "broker"); err != nil {
		t.Fatal(err)
	}
	if alive(pid) || time.Since(start) > r.cfg.StopTimeout {
		t.Errorf("after kill: alive %v, %s; want gone at once", alive(pid), time.Since(start))
	}
	if _, ok := r.runningPID("broker"); ok {
		t.Errorf("broker still running after kill")
	}
	if !strings.Contains(stderr.String(), "broker: killing (pid "+strconv.Itoa(pid)+", SIGKILL)") {
		t.Errorf("kill said %q", stderr.String())
	}
}

// TestQuorumStopsTogether: the cluster's nodes each stop cleanly only while
// a majority of them runs, as a KRaft node's controlled shutdown needs the
// controllers' quorum. Stopped one after the other, the last would wait for
// SIGKILL; told all at once, each stops by itself.
func TestQuorumStopsTogether(t *testing.T) {
	r, _, stderr := newTestRunner(t)
	dir := t.TempDir()
	var pids []int
	for n := 1; n <= clusterNodes; n++ {
		// On SIGTERM a node marks itself stopping, then exits once two
		// nodes (a majority, itself among them) are stopping or gone.
		script := fmt.Sprintf(`trap 'touch %[1]s/%[2]d; until [ $(ls %[1]s | wc -l) -ge 2 ]; do sleep 0.02; done; exit 0' TERM; while :; do sleep 0.05; done`, dir, n)
		pids = append(pids, launchFake(t, r, nodeName(n), script))
	}
	if err := r.stop(context.Background(), []string{"kafka-3", "kafka-1", "kafka-2"}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d alive after stop", pid)
		}
	}
	if strings.Contains(stderr.String(), "SIGKILL") {
		t.Errorf("a node needed SIGKILL: %s", stderr.String())
	}
	want := fmt.Sprintf("services: kafka-3: stopping (pid %d)\nservices: kafka-2: stopping (pid %d)\nservices: kafka-1: stopping (pid %d)\n", pids[2], pids[1], pids[0])
	if stderr.String() != want {
		t.Errorf("stop said\n%s\nwant\n%s", stderr.String(), want)
	}
}

// TestRunningPIDTrustsOnlyItsOwn: a pid file whose process is gone, is
// a zombie, or is another program (the pid was given again) is no service.
func TestRunningPIDTrustsOnlyItsOwn(t *testing.T) {
	r, _, _ := newTestRunner(t)
	write := func(pid int) {
		if err := os.WriteFile(r.pidFile("x"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := r.runningPID("x"); ok {
		t.Errorf("running without a pid file")
	}
	// Another program: this test, whose command line does not name .services.
	write(os.Getpid())
	if _, ok := r.runningPID("x"); ok {
		t.Errorf("this test's own pid taken for the service")
	}
	// A zombie: a child that exited and that nothing reaped yet.
	child := exec.Command("sh", "-c", "exit 0; : "+r.cfg.servicesDir()+"/")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Wait() })
	waitFor(t, func() bool { return !alive(child.Process.Pid) })
	write(child.Process.Pid)
	if _, ok := r.runningPID("x"); ok {
		t.Errorf("a zombie taken for a running service")
	}
	write(1 << 30)
	if _, ok := r.runningPID("x"); ok {
		t.Errorf("a pid that does not exist taken for a running service")
	}
}

func TestWaitUntil(t *testing.T) {
	ctx := context.Background()
	r, _, _ := newTestRunner(t)
	logf := filepath.Join(t.TempDir(), "svc.log")
	up := func(context.Context) bool { return true }
	tries := 0
	if err := r.waitUntil(ctx, "svc", logf, time.Minute, up, func(context.Context) error {
		if tries++; tries < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || tries != 3 {
		t.Errorf("waitUntil = %v after %d tries, want nil after 3", err, tries)
	}
	gone := func(context.Context) bool { return false }
	notYet := func(context.Context) error { return errors.New("not yet") }
	var f *Failure
	if err := r.waitUntil(ctx, "svc", logf, time.Minute, gone, notYet); !errors.As(err, &f) || f.Error() != "svc did not come up: the process exited" || f.Log != logf {
		t.Errorf("waitUntil on an exited process = %v, want the failure with its log", err)
	}
	start := time.Now()
	if err := r.waitUntil(ctx, "svc", logf, time.Second, up, notYet); err == nil || err.Error() != "svc did not come up: no answer after 1s" {
		t.Errorf("waitUntil past its timeout = %v", err)
	}
	if took := time.Since(start); took < time.Second || took > 5*time.Second {
		t.Errorf("the timeout of 1s took %s", took)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.waitUntil(cancelled, "svc", logf, time.Minute, up, notYet); !errors.Is(err, context.Canceled) {
		t.Errorf("waitUntil with its context cancelled = %v", err)
	}
}

func TestReportPrintsTheLogTail(t *testing.T) {
	logf := filepath.Join(t.TempDir(), "kafka.log")
	var lines []string
	for i := range 40 {
		lines = append(lines, "line "+strconv.Itoa(i))
	}
	if err := os.WriteFile(logf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := Report(&out, &Failure{Service: "kafka", Log: logf, Reason: "the process exited"}); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	want := "services: error: kafka did not come up: the process exited\nservices: last 30 lines of " + logf + ":\n" + strings.Join(lines[10:], "\n") + "\n"
	if out.String() != want {
		t.Errorf("reported\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if code := Report(&out, ErrDown); code != 1 || out.Len() != 0 {
		t.Errorf("a service down: exit %d, %q; want 1 and nothing printed", code, out.String())
	}
	if code := Report(&out, nil); code != 0 {
		t.Errorf("no error: exit %d", code)
	}
}

func TestLeftovers(t *testing.T) {
	r, _, _ := newTestRunner(t)
	// A process named java whose command line names the checkout's jars.
	java := filepath.Join(t.TempDir(), "java")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(java, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// Its command line names the jars through argv[0], which sleep ignores.
	cmd := exec.Command(java, "30")
	cmd.Args[0] = java + " -cp " + r.cfg.cacheDir() + "/kafka/lib/*"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dirs := []string{r.cfg.servicesDir() + "/", r.cfg.cacheDir() + "/"}
	waitFor(t, func() bool { return strings.Contains(cmdline(cmd.Process.Pid), r.cfg.cacheDir()) })
	if got := leftovers(dirs); len(got) != 1 || got[0] != cmd.Process.Pid {
		t.Errorf("leftovers = %v, want [%d]", got, cmd.Process.Pid)
	}
	if got := leftovers([]string{"/nowhere/"}); len(got) != 0 {
		t.Errorf("leftovers of another checkout = %v, want none", got)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// TestLaunchedServiceRunsAtOnce checks, over many launches, that a
// service is seen running as soon as launch returns. The child's exec
// lets cmd.Start return a moment before the kernel gives the new program
// its arguments; until then /proc/PID/cmdline reads empty, and a check
// made in that moment (the ready wait's first "is it still running")
// said that a service just started had exited. Under load (a CI run
// beside other work) one launch in hundreds hit it.
func TestLaunchedServiceRunsAtOnce(t *testing.T) {
	r, _, _ := newTestRunner(t)
	for i := range 300 {
		name := fmt.Sprintf("fake-%d", i)
		if err := r.launch(name, "", "sh", "-c", "sleep 10; : "+r.cfg.servicesDir()+"/"); err != nil {
			t.Fatal(err)
		}
		pid, ok := r.runningPID(name)
		if !ok {
			t.Fatalf("launch %d of %s: not running when launch returned", i+1, name)
		}
		_ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run()
	}
}
