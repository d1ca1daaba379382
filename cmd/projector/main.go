// Command projector projects documents from a Kafka topic into a vector
// index (Qdrant), a graph (Neo4j) and a relational store (PostgreSQL), and
// checks and repairs their agreement. See README.md and docs/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/projector/projector/internal/shutdown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	disarm := shutdown.Watchdog(ctx, shutdown.Limit, func() { forceExit(os.Stderr) })
	e := env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ,
		interactive: terminal(os.Stdin) && terminal(os.Stdout)}
	code := dispatch(ctx, os.Args[1:], e)
	disarm()
	stop()
	os.Exit(code)
}

// terminal reports whether f is a terminal (a character device).
func terminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// exitForced is the status of a process that was asked to stop and had not
// finished stopping within shutdown.Limit: a step of its stop ignored its
// deadline. Nothing is lost by it (what was not committed is delivered
// again), but it is a bug to report.
const exitForced = 5

// forceExit ends the process with exitForced, first writing the stacks of
// its goroutines to w, to show what the stop still waited for.
func forceExit(w io.Writer) {
	fmt.Fprintf(w, "projector: still running %s after the stop signal; exiting with status %d; the goroutines still running:\n", shutdown.Limit, exitForced)
	_ = pprof.Lookup("goroutine").WriteTo(w, 1)
	os.Exit(exitForced)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env env) error
	// logsWarnings: the command writes a JSON log to stderr and logs the
	// start-up warnings itself (env.warnings), so that stderr stays JSON.
	logsWarnings bool
}

// env is what a subcommand may touch of its process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// interactive: standard input and output are a terminal, so a
	// command may ask before it changes something (replay does).
	interactive bool
	getenv      func(string) string
	// environ lists the environment (os.Environ), to find PROJECTOR_*
	// variables that no flag reads; nil in tests that need no such check.
	environ func() []string
	// warnings are said once at start: variables that no flag reads.
	warnings []string
	// onFlagSet, when set, is given every flag set a command creates, so
	// that knownVariables can list the flags of every command.
	onFlagSet func(*flag.FlagSet)
}

func commands() []command {
	return []command{
		{name: "run", summary: "consume the document topic and project it into the three stores", run: runCommand, logsWarnings: true},
		{name: "publish", summary: "publish documents, one JSON object a line, keyed by document_key", run: publishCommand},
		{name: "ids", summary: "print the chunk ids of a document version (--check: look them up in the stores)", run: idsCommand},
		{name: "replay", summary: "reset the consumer group's offsets (earliest, an offset or a time) to project again", run: replayCommand},
		{name: "reconcile", summary: "compare the three stores with the decision store by chunk ids; --repair fixes", run: reconcileCommand},
		{name: "probe", summary: "check /healthz or /readyz of a running projector (container health checks)", run: probeCommand},
		{name: "ledger-prune", summary: "delete ledger rows older than the retention, keeping current versions' rows", run: ledgerPruneCommand},
		{name: "bench", summary: "measure throughput end to end against the real services, next to the stores' ceiling and a naive projector", run: benchCommand},
		{name: "redrive", summary: "publish chosen dead letters (by reason, time or offset) back to the document topic, once", run: redriveCommand},
		{name: "partitions", summary: "list the partitions of a running projector, with their state (its --admin-addr)", run: partitionsCommand},
		{name: "resume", summary: "resume a halted partition of a running projector without a restart", run: resumeCommand},
		{name: "generation", summary: "build an index generation beside the live one with another embedder (start), list them (status), drop one being built (abort)", run: generationCommand},
		{name: "migrate", summary: "prepare the three stores (collection, constraints, schema migrations) for this build, then exit", run: migrateCommand},
		{name: "version", summary: "print the version and commit of this build", run: versionCommand},
	}
}

// exitError carries a process exit code other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitUsage is the status of every usage error: a flag or argument that is
// unknown, malformed or out of range, in any subcommand.
const exitUsage = 2

// usageError marks a bad flag or argument: exit status 2.
func usageError(err error) error {
	var exit *exitError
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &exit) {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

// dispatch runs a subcommand and turns its error into an exit code. It is
// the only place that prints an error.
func dispatch(ctx context.Context, args []string, e env) int {
	stderr := e.stderr
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args[0] = "version"
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if e.environ != nil {
			e.warnings = unknownVariables(ctx, e.environ())
		}
		if !c.logsWarnings {
			for _, w := range e.warnings {
				fmt.Fprintf(stderr, "projector %s: warning: %s\n", c.name, w)
			}
		}
		err := c.run(ctx, args[1:], e)
		var exit *exitError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &exit):
			fmt.Fprintf(stderr, "projector %s: %v\n", c.name, exit.err)
			return exit.code
		default:
			fmt.Fprintf(stderr, "projector %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "projector: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: projector <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery flag --some-name can also be set as PROJECTOR_SOME_NAME, but for a few flags whose name another command uses")
	fmt.Fprintln(w, "with another meaning, which read PROJECTOR_<COMMAND>_SOME_NAME; `projector <command> -h` lists the flags, each with its variable.")
}
