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
		// The contract gives every flag of publish and replay its
		// PROJECTOR_<FLAG>: publish --partitions (of a topic it creates)
		// and replay --partitions (which to reset) share one. Neither
		// belongs in a shared environment, and replay prints its plan.
		"partitions",
	}
	readers := map[string][]string{}
	for _, fs := range flagSets(t) {
		fs.VisitAll(func(f *flag.Flag) {
			v := variable(fs.Name(), f.Name)
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
