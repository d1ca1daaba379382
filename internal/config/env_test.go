package config

import (
	"flag"
	"io"
	"strings"
	"testing"
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
	if err := Parse(fs, []string{"--topic", "from-flag"}, func(k string) string { return env[k] }); err != nil {
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

func TestParseBadEnvNamesVariable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("batch-size", 1, "")
	err := Parse(fs, nil, func(k string) string {
		if k == "PROJECTOR_BATCH_SIZE" {
			return "many"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "PROJECTOR_BATCH_SIZE") {
		t.Fatalf("error = %v, want one naming PROJECTOR_BATCH_SIZE", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("qdrant-collection"); got != "PROJECTOR_QDRANT_COLLECTION" {
		t.Errorf("EnvName = %q, want PROJECTOR_QDRANT_COLLECTION", got)
	}
}
