package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/replay"
)

func TestPrintRows(t *testing.T) {
	var b bytes.Buffer
	printRows(&b, "reset the offsets of group projector on topic documents:", []replay.Row{
		{Partition: 0, Now: 12, After: 0, Start: 0, End: 12, ClampedFrom: -1},
		{Partition: 1, Now: -1, After: 30, Start: 4, End: 30, ClampedFrom: 99},
		{Partition: 2, Now: 7, After: 9, Start: 0, End: 9, ClampedFrom: -1, NoRecordAfter: true},
	})
	got := b.String()
	for _, want := range []string{
		"reset the offsets of group projector on topic documents:",
		"PARTITION  NOW   AFTER  RE-READ  START  END  NOTE",
		"0          12    0      12       0      12",
		"1          none  30     -        4      30   offset 99 is outside the partition's range 4..30; clamped; nothing committed",
		"2          7     9      0        0      9    no record at or after that time; set to the end; skips 2 records, never read",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printRows printed\n%s\nwant a line containing %q", got, want)
		}
	}
}

// replayCluster is a fake Kafka whose topic documents has two partitions
// of five records, all committed by the group projector.
func replayCluster(t *testing.T) (brokers string, adm *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "documents"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var recs []*kgo.Record
	for p := range int32(2) {
		for _, k := range []string{"a", "b", "c", "a", "b"} {
			recs = append(recs, &kgo.Record{Topic: "documents", Partition: p, Key: []byte(k), Value: []byte("{}")})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm = kadm.NewClient(cl)
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: "documents", Partition: 0, At: 5, LeaderEpoch: -1})
	o.Add(kadm.Offset{Topic: "documents", Partition: 1, At: 5, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(context.Background(), "projector", o); err != nil {
		t.Fatal(err)
	}
	return strings.Join(c.ListenAddrs(), ","), adm
}

func committedOffsets(t *testing.T, adm *kadm.Client) string {
	t.Helper()
	o, err := adm.FetchOffsets(context.Background(), "projector")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p := range int32(2) {
		c, _ := o.Lookup("documents", p)
		out = append(out, strconv.FormatInt(c.At, 10))
	}
	return strings.Join(out, " ")
}

// Issue 28: replay changed the group at once. Now, like
// kafka-consumer-groups --reset-offsets, it prints the plan and changes
// nothing without --execute; a terminal is asked; --execute resets.
func TestReplayPreviewsUnlessExecuted(t *testing.T) {
	brokers, adm := replayCluster(t)
	getenv := func(k string) string { return map[string]string{"PROJECTOR_BROKERS": brokers}[k] }
	tests := []struct {
		name        string
		args        []string
		interactive bool
		answer      string
		output      []string
		committed   string
	}{
		{"a plan by default", []string{"--to", "earliest"}, false, "", []string{
			"plan: reset the offsets of group projector on topic documents (nothing is changed yet):",
			"0          5    0      5        0      5", "1          5    0      5        0      5",
			"the group reads 10 records again, of 3 documents", "the group has no live member",
			"nothing changed: run again with --execute"}, "5 5"},
		{"a plan with --dry-run", []string{"--to", "2", "--dry-run"}, true, "yes\n", []string{"nothing changed"}, "5 5"},
		{"a terminal that does not say yes", []string{"--to", "earliest"}, true, "no\n", []string{"reset these offsets? type yes", "nothing changed"}, "5 5"},
		{"a terminal that says yes", []string{"--to", "3", "--partitions", "1"}, true, "yes\n", []string{"reset the offsets of group projector on topic documents:"}, "5 3"},
		{"--execute", []string{"--to", "earliest", "--execute"}, false, "", []string{"reset the offsets of group projector on topic documents:"}, "0 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dispatch(context.Background(), append([]string{"replay"}, tt.args...), env{stdin: strings.NewReader(tt.answer),
				stdout: &stdout, stderr: &stderr, getenv: getenv, interactive: tt.interactive})
			if code != 0 {
				t.Fatalf("replay %v = exit %d\n%s%s", tt.args, code, stdout.String(), stderr.String())
			}
			for _, want := range tt.output {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("replay %v printed\n%s\nwant %q", tt.args, stdout.String(), want)
				}
			}
			if got := committedOffsets(t, adm); got != tt.committed {
				t.Errorf("committed after replay %v = %s, want %s", tt.args, got, tt.committed)
			}
		})
	}
}

// Every argument is checked before the group is touched: a partition the
// topic lacks, and the removed --remove-static-members, exit 2 and change
// nothing.
func TestReplayUsageErrorsChangeNothing(t *testing.T) {
	brokers, adm := replayCluster(t)
	getenv := func(k string) string { return map[string]string{"PROJECTOR_BROKERS": brokers}[k] }
	for _, args := range [][]string{
		{"--to", "earliest", "--execute", "--partitions", "0,7"},
		{"--to", "earliest", "--execute", "--remove-static-members"},
		{"--to", "earliest", "--execute", "--dry-run"},
		{"--to", "earliest", "--execute", "--wait", "-1s"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"replay"}, args...), strings.NewReader(""), &stdout, &stderr, getenv)
		if code != 2 {
			t.Errorf("replay %v = exit %d, want 2\n%s", args, code, stderr.String())
		}
		if got := committedOffsets(t, adm); got != "5 5" {
			t.Errorf("committed after replay %v = %s, want 5 5 as before", args, got)
		}
	}
}
