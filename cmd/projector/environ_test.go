package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// flagSets returns the flag set of every command, as -h registers it.
func flagSets(t *testing.T) []*flag.FlagSet {
	t.Helper()
	var sets []*flag.FlagSet
	e := env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
	for _, c := range commands() {
		_ = c.run(context.Background(), []string{"-h"}, e)
	}
	return sets
}

// TestVariablesSharedOnPurpose fails when two commands read one variable
// for a flag not known to mean the same in both: a new flag name that
// collides needs a decision, an entry here or in ownVariables, before one
// ConfigMap setting silently changes another command (issue 23: redrive's
// --group read the projector's PROJECTOR_GROUP).
func TestVariablesSharedOnPurpose(t *testing.T) {
	shared := []string{
		// The connections and the stores' layout.
		"brokers", "kafka-sasl-mechanism", "kafka-sasl-password-file", "kafka-sasl-user", "kafka-tls", "kafka-tls-ca-file",
		"kafka-tls-cert-file", "kafka-tls-key-file", "neo4j-database", "neo4j-password", "neo4j-password-file", "neo4j-tls-ca-file",
		"neo4j-uri", "neo4j-user", "postgres-dsn", "postgres-schema", "qdrant-addr", "qdrant-api-key-file", "qdrant-collection",
		"qdrant-shards", "qdrant-tls", "qdrant-tls-ca-file", "qdrant-upsert-batch", "qdrant-upsert-concurrency",
		"qdrant-upsert-max-bytes", "vector-dim", "graph-chunk-text", "push-url", "admin-url", "admin-token-file",
		"log-format", "log-level",
		// The projector's topics and group, and how it reads events:
		// reconcile and bench must read them as run does.
		"topic", "dlq-topic", "group", "chunk-bytes", "max-chunks", "max-record-bytes", "batch-records", "max-batch-chunks",
		"embedder", "embed-api-key-file", "embed-batch", "embed-cache", "embed-concurrency", "embed-dim", "embed-model",
		"embed-timeout", "embed-url",
		// Change nothing: replay's and redrive's mean the same.
		"dry-run",
		// Act on the plan printed: replay's and generation's mean the same.
		"execute",
	}
	readers := map[string][]string{}
	for _, fs := range flagSets(t) {
		fs.VisitAll(func(f *flag.Flag) {
			if _, renamed := f.Value.(renamedFlag); renamed {
				return // it reads nothing: setting it is refused
			}
			v := variableOf(fs.Name(), f.Name)
			readers[v] = append(readers[v], fs.Name()+" --"+f.Name)
		})
	}
	for v, flags := range readers {
		if len(flags) < 2 {
			continue
		}
		_, name, _ := strings.Cut(flags[0], " --")
		if !slices.Contains(shared, name) {
			t.Errorf("%s is read by %s: add the flag to ownVariables where it means something else, or to this test's shared list", v, strings.Join(flags, ", "))
		}
	}
}

// Every flag ownVariables names is a flag of its command, so the list
// cannot go stale when a flag is renamed.
func TestOwnVariablesNameFlags(t *testing.T) {
	for _, fs := range flagSets(t) {
		for _, name := range ownVariables(fs.Name()) {
			if fs.Lookup(name) == nil {
				t.Errorf("ownVariables(%q) names --%s, which the command does not have", fs.Name(), name)
			}
		}
	}
}

// Redrive reads its own group, never the projector's PROJECTOR_GROUP,
// which the shipped ConfigMap sets for run (issue 23).
func TestRedriveGroupVariable(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "documents", "documents.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PROJECTOR_GROUP": "projector"}, "(group projector-redrive.all)"},
		{map[string]string{"PROJECTOR_GROUP": "projector", "PROJECTOR_REDRIVE_GROUP": "mine"}, "(group mine)"},
	} {
		tt.env["PROJECTOR_BROKERS"] = strings.Join(c.ListenAddrs(), ",")
		var stdout, stderr strings.Builder
		code := run(context.Background(), []string{"redrive", "--dry-run"}, strings.NewReader(""), &stdout, &stderr,
			func(k string) string { return tt.env[k] })
		if code != 0 || !strings.Contains(stdout.String(), tt.want) {
			t.Errorf("redrive with %v: exit %d, stdout %q, want it to name %s\n%s", tt.env, code, stdout.String(), tt.want, stderr.String())
		}
	}
}

// Issue 28: help said every flag reads PROJECTOR_<FLAG>, and redrive's
// did not. Every command's -h now names each flag's variable.
func TestHelpNamesEachVariable(t *testing.T) {
	for _, c := range commands() {
		var stderr strings.Builder
		_ = c.run(context.Background(), []string{"-h"}, env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr,
			getenv: func(string) string { return "" }})
		lines := strings.Split(stderr.String(), "\n")
		flags := 0
		for i, line := range lines {
			name, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			flags++
			name, _, _ = strings.Cut(name, " ")
			want := "(env " + variableOf(c.name, name) + ")"
			found := false
			for _, next := range lines[i+1:] {
				if strings.HasPrefix(next, "  -") {
					break
				}
				found = found || strings.TrimSpace(next) == want
			}
			if !found {
				t.Errorf("projector %s -h: --%s is not followed by %s", c.name, name, want)
			}
		}
		if flags == 0 && c.name != "version" {
			t.Errorf("projector %s -h lists no flag", c.name)
		}
	}
}

// Issue 28: PROJECTOR_DRY_RUN=true projector redrive sent, and a variable
// exported for one command changed another. A variable that looks as if
// it set a flag of the command and does not is refused before anything is
// done; one of the same meaning is shared.
func TestVariablesOfAnotherCommandAreRefused(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "documents", "documents.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tt := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"redrive"}, map[string]string{"PROJECTOR_DRY_RUN": "true"}, 0, "would send 0 of 0"},
		{[]string{"redrive"}, map[string]string{"PROJECTOR_REDRIVE_DRY_RUN": "true"}, 2, "PROJECTOR_REDRIVE_DRY_RUN is no longer read: --dry-run reads PROJECTOR_DRY_RUN"},
		{[]string{"redrive", "--dry-run"}, map[string]string{"PROJECTOR_BATCH": "10"}, 2, "redrive reads --batch from PROJECTOR_REDRIVE_BATCH (no command reads it)"},
		{[]string{"redrive", "--dry-run"}, map[string]string{"PROJECTOR_SINCE": "2026-01-01T00:00:00Z"}, 2, "PROJECTOR_SINCE is set, but projector redrive reads --since from PROJECTOR_REDRIVE_SINCE (it is reconcile --since's"},
		{[]string{"redrive", "--dry-run"}, map[string]string{"PROJECTOR_SINCE": "2026-01-01T00:00:00Z", "PROJECTOR_REDRIVE_SINCE": "2026-01-01T00:00:00Z"}, 0, "would send"},
		{[]string{"redrive", "--dry-run"}, map[string]string{"PROJECTOR_GROUP": "projector"}, 0, "(group projector-redrive.all)"},
		{[]string{"publish"}, map[string]string{"PROJECTOR_PARTITIONS": "0"}, 2, "renamed --topic-partitions (PROJECTOR_TOPIC_PARTITIONS)"},
		{[]string{"publish", "--partitions", "2"}, nil, 2, "renamed --topic-partitions"},
		{[]string{"migrate"}, map[string]string{"PROJECTOR_TIMEOUT": "1s"}, 2, "migrate reads --timeout from PROJECTOR_MIGRATE_TIMEOUT"},
	} {
		env := map[string]string{"PROJECTOR_BROKERS": strings.Join(c.ListenAddrs(), ",")}
		for k, v := range tt.env {
			env[k] = v
		}
		var stdout, stderr strings.Builder
		code := run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] })
		if code != tt.code || !strings.Contains(stdout.String()+stderr.String(), tt.want) {
			t.Errorf("projector %v with %v: exit %d\n%s%s\nwant exit %d and %q", tt.args, tt.env, code, stdout.String(), stderr.String(), tt.code, tt.want)
		}
	}
}
