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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env env) error
}

// env is what a subcommand may touch of its process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

func commands() []command {
	return []command{
		{"run", "consume the document topic and project it into the three stores", runCommand},
		{"publish", "publish documents, one JSON object a line, keyed by document_key", publishCommand},
		{"ids", "print the chunk ids of a document version (--check: look them up in the stores)", idsCommand},
		{"replay", "reset the consumer group's offsets (earliest, an offset or a time) to project again", replayCommand},
		{"reconcile", "compare the three stores with the decision store by chunk ids; --repair fixes", reconcileCommand},
		{"probe", "check /healthz or /readyz of a running projector (container health checks)", probeCommand},
		{"ledger-prune", "delete ledger rows older than the retention, keeping current versions' rows", ledgerPruneCommand},
		{"bench", "measure throughput end to end against the real services, next to the stores' ceiling and a naive projector", benchCommand},
		{"migrate", "prepare the three stores (collection, constraints, schema migrations) for this build, then exit", migrateCommand},
		{"version", "print the version and commit of this build", versionCommand},
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

// run dispatches to a subcommand and turns its error into an exit code. It
// is the only place that prints an error.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	e := env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
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
	fmt.Fprintln(w, "\nEvery flag --some-name can also be set as PROJECTOR_SOME_NAME; `projector <command> -h` lists the flags.")
}
