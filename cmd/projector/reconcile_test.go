package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/reconcile"
)

func TestUsageErrorsExit2(t *testing.T) {
	tests := [][]string{
		{"reconcile", "--page-size", "0"},
		{"reconcile", "--page-size", "10001"},
		{"reconcile", "--since", "yesterday"},
		{"reconcile", "--max-discrepancies", "-1"},
		{"reconcile", "--key-prefix", strings.Repeat("k", 513)},
		{"reconcile", "extra"},
		{"reconcile", "--no-such-flag"},
		{"replay"},
		{"replay", "--to", "tomorrow"},
		{"replay", "--to", "earliest", "--partitions", "a"},
		{"ledger-prune", "--retention", "-1h"},
		{"ledger-prune", "--batch", "0"},
		{"ids", "--check", "doc", "0", "1"},
		{"ids", "doc", "1"},
		{"run", "--max-record-bytes", "0"},
		{"run", "--max-chunks", "0"},
		{"run", "--max-batch-bytes", "-1"},
		{"run", "--qdrant-upsert-max-bytes", "1000"},
		{"run", "--dlq-retention", "-1h"},
	}
	for _, args := range tests {
		var stderr bytes.Buffer
		code := run(context.Background(), args, nil, &bytes.Buffer{}, &stderr, func(string) string { return "" })
		if code != 2 {
			t.Errorf("projector %v exited %d (%s), want 2", args, code, strings.TrimSpace(stderr.String()))
		}
	}
}

func TestIDsFlagsAfterArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"ids", "doc-42", "3", "1", "--postgres-schema", "x"}, nil, &stdout, &stderr, func(string) string { return "" })
	if want := keys.ChunkID("doc-42", 3, 0).String() + "\n"; code != 0 || stdout.String() != want {
		t.Errorf("ids with a flag after the arguments = exit %d, %q (%s); want 0 and %q", code, stdout.String(), stderr.String(), want)
	}
}

func discrepancy() *reconcile.Discrepancy {
	return &reconcile.Discrepancy{
		Store: "index", Class: reconcile.VersionSkew, Key: "doc 7", Status: reconcile.StatusLive, Version: 2,
		Want: 2, Held: 1, StoreVersions: []int64{1}, Missing: 2, Extra: 12,
		MissingIDs: keys.ChunkIDs("doc 7", 2, 2), ExtraIDs: []uuid.UUID{keys.ChunkID("doc 7", 1, 0)},
		Action: reconcile.Reprojected,
	}
}

func TestTableReport(t *testing.T) {
	var b bytes.Buffer
	rep := &tableReport{w: &b}
	if err := rep.Report(discrepancy()); err != nil {
		t.Fatal(err)
	}
	rep.summary(&reconcile.Summary{Documents: 5, Found: map[string]map[reconcile.Class]int64{"index": {reconcile.VersionSkew: 1}}, Resolved: 1, Duration: 1500 * time.Millisecond}, []string{"index"}, true)
	got := b.String()
	for _, want := range []string{
		"STORE       CLASS              STATUS     VERSION   WANT   HELD  MISSING  EXTRA  ACTION        DOCUMENT\n",
		"index       version_skew       live             2      2      1        2     12  reprojected   \"doc 7\"\n",
		"    store holds versions [1]\n",
		"    missing: " + keys.ChunkID("doc 7", 2, 0).String(),
		"    extra: " + keys.ChunkID("doc 7", 1, 0).String() + " and 11 more\n",
		"summary documents=5 unknown_keys=0 total=1 resolved=1 unresolved=0 index.missing=0 index.orphaned=0 index.version_skew=1 index.withdrawn_present=0 seconds=1.5\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table:\n%s\nwant it to contain %q", got, want)
		}
	}
	var empty bytes.Buffer
	(&tableReport{w: &empty}).summary(&reconcile.Summary{Found: map[string]map[reconcile.Class]int64{}}, nil, true)
	if !strings.HasPrefix(empty.String(), "no discrepancies\nsummary documents=0 ") {
		t.Errorf("table of a clean run = %q, want \"no discrepancies\" and the summary", empty.String())
	}
	var failed bytes.Buffer
	(&tableReport{w: &failed}).summary(&reconcile.Summary{Found: map[string]map[reconcile.Class]int64{}}, nil, false)
	if got := failed.String(); strings.Contains(got, "no discrepancies") || !strings.HasPrefix(got, "incomplete:") {
		t.Errorf("table of a run that stopped on an error = %q, want it incomplete, not clean", got)
	}
}

func TestJSONReport(t *testing.T) {
	var b bytes.Buffer
	rep := &jsonReport{w: &b}
	if err := rep.Report(discrepancy()); err != nil {
		t.Fatal(err)
	}
	rep.summary(&reconcile.Summary{Documents: 5, Found: map[string]map[reconcile.Class]int64{"index": {reconcile.VersionSkew: 1}}}, []string{"index"}, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("json report = %q, want two lines", b.String())
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil {
		t.Fatal(err)
	}
	if d["type"] != "discrepancy" || d["class"] != "version_skew" || d["document_key"] != "doc 7" || d["extra"] != 12.0 || d["action"] != "reprojected" {
		t.Errorf("discrepancy line = %v, want type, class, key, extra and action", d)
	}
	var s struct {
		Type          string
		Documents     int64
		Total         int64
		Discrepancies map[string]map[string]int64
		Complete      bool
	}
	if err := json.Unmarshal([]byte(lines[1]), &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "summary" || s.Documents != 5 || s.Total != 1 || s.Discrepancies["index"]["version_skew"] != 1 || len(s.Discrepancies["index"]) != 4 || s.Complete {
		t.Errorf("summary line = %+v, want 5 documents, 1 skew, every class, and incomplete", s)
	}
}
