package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/testenv"
)

// replay runs `projector replay` on this world's topic and group.
func (w *world) replay(extra ...string) (stdout, stderr string, code int) {
	w.t.Helper()
	return w.cli(append([]string{"replay", "--brokers", w.brokers, "--topic", w.topic, "--group", w.group}, extra...)...)
}

// groupOffsets returns the group's committed offset per partition (-1: none).
func (w *world) groupOffsets() map[int32]int64 {
	w.t.Helper()
	offsets, err := w.adm.FetchOffsets(context.Background(), w.group)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]int64{}
	for p := range int32(w.partitions) {
		out[p] = -1
		if o, ok := offsets.Lookup(w.topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// TestReplayFromEarliestConverges is the recovery promise: after a replay
// from the earliest offset and a run to zero lag, every store is byte for
// byte what it was.
func TestReplayFromEarliestConverges(t *testing.T) {
	w := newWorld(t, 3)
	docs := corpus(w, rand.New(rand.NewPCG(3, 4)), testenv.Size(t, "E2E_DOCUMENTS", 90, 0))
	w.publishFile(lines(docs))
	p := w.start(nil, "--batch-records", "25")
	w.waitDrained(p, 3*time.Minute)
	p.stop()
	before := w.snapshot()
	ends := w.groupOffsets()

	stdout, stderr, code := w.replay("--to", "earliest")
	if code != 0 {
		t.Fatalf("replay --to earliest = exit %d: %s%s", code, stdout, stderr)
	}
	for part, end := range ends {
		row := fmt.Sprintf("%d  %d  0", part, end)
		if !strings.Contains(strings.Join(strings.Fields(stdout), "  "), row) {
			t.Errorf("replay output:\n%s\nwant a row %q (partition, before, after)", stdout, row)
		}
	}
	for part, at := range w.groupOffsets() {
		if at != 0 {
			t.Errorf("partition %d committed at %d after the replay, want 0", part, at)
		}
	}

	p = w.start(nil, "--batch-records", "25")
	w.waitDrained(p, 3*time.Minute)
	m := p.metrics()
	p.stop()
	w.committedEqualsEnd()
	requireSameSnapshot(t, w.snapshot(), before)
	redelivered, stale := m[`projector_records_total{outcome="redelivered"}`], m[`projector_records_total{outcome="stale"}`]
	if projected := m[`projector_records_total{outcome="projected"}`]; projected != 0 || redelivered+stale != float64(len(docs)) {
		t.Errorf("replayed run: %v projected, %v redelivered, %v stale; want 0 projected and %d records redelivered or stale", projected, redelivered, stale, len(docs))
	}
}

// TestReplayRefusesWithLiveMember: offsets of a group with members cannot
// be reset under them; replay says so and changes nothing.
func TestReplayRefusesWithLiveMember(t *testing.T) {
	w := newWorld(t, 2)
	w.publishFile(lines([]doc{{Key: w.key("a"), Version: 1, Chunks: []string{"x"}}}))
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	before := w.groupOffsets()
	stdout, stderr, code := w.replay("--to", "earliest")
	if code != 4 || !strings.Contains(stderr, "has 1 live member(s)") || !strings.Contains(stderr, "stop every `projector run`") {
		t.Errorf("replay with a live member = exit %d, stderr %q; want exit 4 saying 1 live member must be stopped", code, stderr)
	}
	if stdout != "" {
		t.Errorf("replay with a live member printed %q, want nothing on standard output", stdout)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("committed offsets = %v after a refused replay, want %v", got, before)
	}
	p.stop()
}

// TestReplayRemovesStoppedStaticMembers: a static member (as the
// StatefulSet runs them) sends no LeaveGroup when it stops, so right after
// scaling to zero the group still has it for the session timeout. replay
// names it and why; --remove-static-members removes it and resets at once.
func TestReplayRemovesStoppedStaticMembers(t *testing.T) {
	w := newWorld(t, 1)
	w.produce(doc{Key: w.key("a"), Version: 1, Chunks: []string{"x"}}.record())
	p := w.start(nil, "--group-instance-id", w.group+"-0", "--session-timeout", "5m")
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	_, stderr, code := w.replay("--to", "earliest")
	if code != 4 || !strings.Contains(stderr, "static (instance ids "+w.group+"-0)") || !strings.Contains(stderr, "--remove-static-members") {
		t.Fatalf("replay after a static member stopped = exit %d, %q; want 4 naming the member and the way out", code, stderr)
	}
	if _, stderr, code := w.replay("--to", "earliest", "--remove-static-members", "--dry-run"); code != 2 {
		t.Errorf("--remove-static-members with --dry-run = exit %d, %q; want 2", code, stderr)
	}
	stdout, stderr, code := w.replay("--to", "earliest", "--remove-static-members")
	if code != 0 || !strings.Contains(stdout, "removed the static member(s) "+w.group+"-0") {
		t.Fatalf("replay --remove-static-members = exit %d, %q\n%s", code, stdout, stderr)
	}
	if got := w.groupOffsets(); got[0] != 0 {
		t.Errorf("committed offset = %d after the replay, want 0", got[0])
	}
}

// TestReplayToTimeAndOffset resets to the first record at or after a time,
// and to literal offsets, clamped to each partition's range.
func TestReplayToTimeAndOffset(t *testing.T) {
	w := newWorld(t, 2)
	record := func(i int) *kgo.Record {
		d := doc{Key: w.key(fmt.Sprintf("d%02d", i)), Version: 1, Chunks: []string{fmt.Sprintf("chunk of %d", i)}}
		return d.record()
	}
	var early, late []*kgo.Record
	for i := range 8 {
		early = append(early, record(i))
		late = append(late, record(100+i))
	}
	w.produce(early...)
	time.Sleep(50 * time.Millisecond)
	at := time.Now()
	time.Sleep(50 * time.Millisecond)
	w.produce(late...)
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	ends := w.groupOffsets()

	// The first late record of each partition is where a replay to `at`
	// resumes; a partition without one resumes at its end.
	want := map[int32]int64{}
	for part, end := range ends {
		want[part] = end
	}
	for _, r := range late {
		want[r.Partition] = min(want[r.Partition], r.Offset)
	}
	if _, stderr, code := w.replay("--to", at.Format(time.RFC3339Nano)); code != 0 {
		t.Fatalf("replay --to %s = exit %d: %s", at.Format(time.RFC3339Nano), code, stderr)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("committed after replay --to <time> = %v, want %v (the first record at or after it)", got, want)
	}

	// A dry run prints the plan and commits nothing.
	planned := w.groupOffsets()
	stdout, stderr, code := w.replay("--to", "earliest", "--dry-run")
	if code != 0 || !strings.Contains(stdout, "nothing changed") || !strings.Contains(stdout, "PARTITION") {
		t.Fatalf("replay --to earliest --dry-run = exit %d:\n%s%s\nwant exit 0 and the plan", code, stdout, stderr)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(planned) {
		t.Errorf("committed after a dry run = %v, want %v as before", got, planned)
	}

	tests := []struct {
		name   string
		args   []string
		want   map[int32]int64
		output string
	}{
		{"an offset on one partition", []string{"--to", "1", "--partitions", "0"}, map[int32]int64{0: 1, 1: want[1]}, ""},
		{"past the end is clamped", []string{"--to", "999999", "--partitions", "1"}, map[int32]int64{0: 1, 1: ends[1]}, "offset 999999 is outside the partition's range"},
		{"earliest on every partition", []string{"--to", "earliest", "--partitions", "0,1"}, map[int32]int64{0: 0, 1: 0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := w.replay(tt.args...)
			if code != 0 || !strings.Contains(stdout, tt.output) || !strings.Contains(stdout, "PARTITION") {
				t.Fatalf("replay %v = exit %d:\n%s%s\nwant exit 0, a table and %q", tt.args, code, stdout, stderr, tt.output)
			}
			if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("committed after replay %v = %v, want %v", tt.args, got, tt.want)
			}
		})
	}

	for _, args := range [][]string{{}, {"--to", "yesterday"}, {"--to", "-3"}, {"--to", "earliest", "--partitions", "7"}, {"--to", "earliest", "--partitions", "x"}} {
		if _, stderr, code := w.replay(args...); code != 2 {
			t.Errorf("replay %v = exit %d (%s), want 2", args, code, strings.TrimSpace(stderr))
		}
	}
}
