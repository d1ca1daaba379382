package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"testing"
)

func TestParseCounts(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"1,2,4", "[1 2 4]", true},
		{" 8 ", "[8]", true},
		{"0", "[]", false},
		{"1,,2", "[]", false},
		{"two", "[]", false},
		{"", "[]", false},
	}
	for _, tt := range tests {
		got, err := parseCounts(tt.in)
		if (err == nil) != tt.ok || (tt.ok && fmt.Sprint(got) != tt.want) {
			t.Errorf("parseCounts(%q) = %v, %v; want %s, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// TestServiceEnv checks that the measured service gets the Kafka and
// store flags given to bench, through its environment, and nothing that
// each measurement sets itself.
func TestServiceEnv(t *testing.T) {
	var f benchFlags
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	forwarded := f.register(fs)
	err := fs.Parse([]string{"--brokers", "k:9092", "--postgres-dsn", "postgres://u:secret@db/p", "--qdrant-upsert-batch", "64",
		"--qdrant-collection", "mine", "--postgres-schema", "mine", "--documents", "10", "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	got := serviceEnv([]string{"PATH=/bin"}, fs, forwarded)
	for _, want := range []string{"PATH=/bin", "PROJECTOR_BROKERS=k:9092", "PROJECTOR_POSTGRES_DSN=postgres://u:secret@db/p", "PROJECTOR_QDRANT_UPSERT_BATCH=64"} {
		if !slices.Contains(got, want) {
			t.Errorf("service environment %q lacks %q", got, want)
		}
	}
	for _, unwanted := range []string{"PROJECTOR_QDRANT_COLLECTION=mine", "PROJECTOR_POSTGRES_SCHEMA=mine", "PROJECTOR_DOCUMENTS=10", "PROJECTOR_LOG_LEVEL=debug"} {
		if slices.Contains(got, unwanted) {
			t.Errorf("service environment %q has %q, want it left out", got, unwanted)
		}
	}
}
