package config

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	env := map[string]string{
		"PROJECTOR_BROKERS":     "env:9092",
		"PROJECTOR_TOPIC":       "from-env",
		"PROJECTOR_BATCH_SIZE":  "7",
		"PROJECTOR_UNUSED_FLAG": "x",
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	brokers := fs.String("brokers", "default:9092", "")
	topic := fs.String("topic", "documents", "")
	batch := fs.Int("batch-size", 1, "")
	group := fs.String("group", "projector", "")
	if err := Parse(fs, []string{"--topic", "from-flag"}, func(k string) string { return env[k] }, EnvName); err != nil {
		t.Fatal(err)
	}
	got := []string{*brokers, *topic, *group}
	want := []string{"env:9092", "from-flag", "projector"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %d = %q, want %q", i, got[i], want[i])
		}
	}
	if *batch != 7 {
		t.Errorf("batch-size = %d, want 7", *batch)
	}
}

// TestParseBadEnvNamesVariable: a variable's value a flag refuses is
// named with the variable, the value, the flag and what the flag wants:
// the flag package's own "parse error" says none of that.
func TestParseBadEnvNamesVariable(t *testing.T) {
	for _, tt := range []struct {
		name, value, want string
		define            func(fs *flag.FlagSet)
	}{
		{"PROJECTOR_BATCH_SIZE", "many", `environment variable PROJECTOR_BATCH_SIZE="many" (for --batch-size): want a number`,
			func(fs *flag.FlagSet) { fs.Int("batch-size", 1, "records a batch") }},
		{"PROJECTOR_TIMEOUT", "soon", `environment variable PROJECTOR_TIMEOUT="soon" (for --timeout): want a duration such as 30s or 5m`,
			func(fs *flag.FlagSet) { fs.Duration("timeout", time.Second, "how long") }},
		{"PROJECTOR_REPAIR", "maybe", `environment variable PROJECTOR_REPAIR="maybe" (for --repair): want true or false`,
			func(fs *flag.FlagSet) { fs.Bool("repair", false, "repair") }},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		tt.define(fs)
		err := Parse(fs, nil, func(k string) string {
			if k == tt.name {
				return tt.value
			}
			return ""
		}, EnvName)
		if err == nil || err.Error() != tt.want {
			t.Errorf("error = %v, want %q", err, tt.want)
		}
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("qdrant-collection"); got != "PROJECTOR_QDRANT_COLLECTION" {
		t.Errorf("EnvName = %q, want PROJECTOR_QDRANT_COLLECTION", got)
	}
	if got := CommandEnvName("ledger-prune", "dry-run"); got != "PROJECTOR_LEDGER_PRUNE_DRY_RUN" {
		t.Errorf("CommandEnvName = %q, want PROJECTOR_LEDGER_PRUNE_DRY_RUN", got)
	}
}

// A command's own variable is read, and the shared one of the same flag
// name is not: the ConfigMap's PROJECTOR_GROUP stays the projector's.
func TestParseCommandVariable(t *testing.T) {
	env := map[string]string{"PROJECTOR_GROUP": "projector", "PROJECTOR_REDRIVE_GROUP": "redrive-position"}
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	group := fs.String("group", "", "")
	envName := func(f string) string { return CommandEnvName(fs.Name(), f) }
	if err := Parse(fs, nil, func(k string) string { return env[k] }, envName); err != nil {
		t.Fatal(err)
	}
	if *group != "redrive-position" {
		t.Errorf("group = %q, want redrive-position from PROJECTOR_REDRIVE_GROUP", *group)
	}
}
