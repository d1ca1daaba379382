package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// run runs the command line args as main does, without the check of the
// environment for unknown variables.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return dispatch(ctx, args, env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv})
}

// TestUnknownVariablesWarn sets a misspelt variable beside correct ones:
// only the misspelt one is warned about, by every command, as a plain line
// where stderr is plain and as a log line where it is the JSON log of run.
func TestUnknownVariablesWarn(t *testing.T) {
	environ := []string{
		"PROJECTOR_BATCH_RECORD=100",            // misspelt --batch-records
		"PROJECTOR_BATCH_RECORDS=100",           // a flag of run
		"PROJECTOR_REPAIR=true",                 // a flag of reconcile only
		"PROJECTOR_GRAPH_CHUNK_TEXT=true",       // a store flag
		"PROJECTOR_KAFKA_SASL_PASSWORD=x",       // a secret without a flag
		"PROJECTOR_EMBED_API_KEY=x",             // likewise
		"PROJECTOR_SECURE_BROKERS=127.0.0.1:1",  // the development services'
		"PROJECTOR_TEST_QDRANT_BIN=/bin/qdrant", // likewise
		"PATH=/usr/bin",
	}
	getenv := func(k string) string {
		for _, kv := range environ {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v
			}
		}
		return ""
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "projector version: warning: PROJECTOR_BATCH_RECORD is set, but no flag of any command reads it"},
		{[]string{"run", "--fence", "bogus"}, `"msg":"PROJECTOR_BATCH_RECORD is set, but no flag of any command reads it`},
	} {
		var stdout, stderr bytes.Buffer
		dispatch(context.Background(), tt.args, env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
			getenv: getenv, environ: func() []string { return environ }})
		out := stderr.String()
		if !strings.Contains(out, tt.want) {
			t.Errorf("projector %s: stderr %q, want it to contain %q", tt.args[0], out, tt.want)
		}
		if n := strings.Count(out, "no flag of any command reads"); n != 1 {
			t.Errorf("projector %s: %d warnings, want 1 (only the misspelt name):\n%s", tt.args[0], n, out)
		}
	}
}

// TestEveryCommandExits2OnUsageErrors requires status 2 for a usage error in every
// subcommand, whether the flag is unknown, its value malformed, or its
// environment variable malformed; a new subcommand is covered by being in
// commands().
func TestEveryCommandExits2OnUsageErrors(t *testing.T) {
	for _, c := range commands() {
		tests := []struct {
			name string
			args []string
			env  map[string]string
		}{
			{"unknown flag", []string{"--no-such-flag"}, nil},
			{"malformed log level", []string{"--log-level", "loud"}, nil},
			{"malformed variable", nil, map[string]string{"PROJECTOR_LOG_LEVEL": "loud"}},
		}
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				if tt.name != "unknown flag" && !hasFlag(t, c.name, "log-level") {
					t.Skip("no --log-level")
				}
				var stdout, stderr bytes.Buffer
				args := append([]string{c.name}, tt.args...)
				code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr, func(k string) string { return tt.env[k] })
				if code != exitUsage {
					t.Errorf("projector %s: exit %d, want %d (stderr %q)", strings.Join(args, " "), code, exitUsage, stderr.String())
				}
			})
		}
	}
}

// hasFlag reports whether subcommand name has the flag, from its -h.
func hasFlag(t *testing.T, name, flag string) bool {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{name, "-h"}, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" }); code != 0 {
		t.Fatalf("projector %s -h: exit %d", name, code)
	}
	return strings.Contains(stderr.String(), "-"+flag+" ")
}

// TestCommandsListOnlyTheirFlags requires a command's -h to leave out the
// stores it never opens.
func TestCommandsListOnlyTheirFlags(t *testing.T) {
	for _, tt := range []struct {
		command string
		absent  []string
	}{
		{"ledger-prune", []string{"qdrant-addr", "brokers"}},
		{"replay", []string{"qdrant-addr", "neo4j-uri", "postgres-dsn"}},
		{"redrive", []string{"qdrant-addr", "neo4j-uri", "postgres-dsn"}},
		{"publish", []string{"qdrant-addr", "neo4j-uri", "postgres-dsn"}},
	} {
		for _, f := range tt.absent {
			if hasFlag(t, tt.command, f) {
				t.Errorf("projector %s -h lists --%s, which it never uses", tt.command, f)
			}
		}
	}
	for _, f := range []string{"postgres-dsn", "neo4j-uri"} {
		if !hasFlag(t, "ledger-prune", f) {
			t.Errorf("projector ledger-prune -h lacks --%s", f)
		}
	}
}

// TestKafkaClientLogsAtTheChosenLevel requires --log-level to set the
// level of the Kafka client's logs as well.
func TestKafkaClientLogsAtTheChosenLevel(t *testing.T) {
	for level, want := range map[string]kgo.LogLevel{
		"debug": kgo.LogLevelDebug, "info": kgo.LogLevelWarn, "warn": kgo.LogLevelWarn, "error": kgo.LogLevelError,
	} {
		lf := logFlags{format: "json", level: level}
		log, err := lf.logger(env{stderr: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if got := kafkaLogLevel(log); got != want {
			t.Errorf("--log-level %s: Kafka client level %v, want %v", level, got, want)
		}
	}
}

// TestAdminEndpointNeedsTokenBeyondLoopback refuses an admin endpoint that
// other machines can reach without a token, before anything is started.
func TestAdminEndpointNeedsTokenBeyondLoopback(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "--admin-addr", "0.0.0.0:8081"}, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
	if code != exitUsage || !strings.Contains(stderr.String(), "--admin-token-file") {
		t.Errorf("run --admin-addr 0.0.0.0:8081 without a token: exit %d, %q; want %d naming --admin-token-file", code, stderr.String(), exitUsage)
	}
}

// TestExtraArgumentsAreRefused: a command that takes flags only refuses an
// argument with exit status 2 and says why, before it touches anything.
// Flag parsing stops at the first argument, so a flag after it used to be
// ignored without a word: replay --to earliest 0 --partitions 0 reset
// every partition, and probe http://x/readyz checked /healthz.
func TestExtraArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"run", "extra"},
		{"publish", "extra"},
		{"replay", "--to", "earliest", "0", "--partitions", "0"},
		{"reconcile", "extra"},
		{"probe", "http://127.0.0.1:1/readyz"},
		{"ledger-prune", "extra"},
		{"bench", "extra"},
		{"redrive", "extra"},
		{"partitions", "extra"},
		{"migrate", "extra"},
		{"version", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // anything that would wait on a server returns at once
		code := run(ctx, args, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
		if code != 2 || !strings.Contains(stderr.String(), "unexpected argument") {
			t.Errorf("projector %s = exit %d, stderr %q; want exit 2 naming the unexpected argument", strings.Join(args, " "), code, stderr.String())
		}
	}
}

// TestContradictoryTimeoutsAreRefusedFirst: a revoke timeout at or above
// the rebalance timeout, or a shutdown timeout that would keep a stopping
// process past 10 s, is a usage error (exit 2), found before the service
// touches any store or topic; the first used to stop the start with
// status 1 after the migrations had run and the dead-letter topic was made.
func TestContradictoryTimeoutsAreRefusedFirst(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--revoke-timeout", "60s", "--rebalance-timeout", "60s"}, "must be below the rebalance timeout"},
		{[]string{"--shutdown-timeout", "25s"}, "--shutdown-timeout: shutdown timeout 25s must be at most 6s"},
	} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code := run(ctx, append([]string{"run"}, tt.args...), strings.NewReader(""), &stdout, &stderr,
			func(string) string { return "" })
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("run %s = exit %d, stderr %q; want exit 2 saying %q", strings.Join(tt.args, " "), code, stderr.String(), tt.want)
		}
	}
}
