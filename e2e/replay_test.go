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

	// Without --execute, the plan, and nothing changed (issue 28).
	keys := map[string]bool{}
	for _, d := range docs {
		keys[d.Key] = true
	}
	stdout, stderr, code := w.replay("--to", "earliest")
	if code != 0 || !strings.Contains(stdout, "plan: reset the offsets of group "+w.group) ||
		!strings.Contains(stdout, "nothing changed: run again with --execute") ||
		!strings.Contains(stdout, fmt.Sprintf("the group reads %d records again, of %d documents", len(docs), len(keys))) {
		t.Fatalf("replay --to earliest = exit %d:\n%s%s\nwant exit 0, the plan and nothing changed", code, stdout, stderr)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Fatalf("committed after replay without --execute = %v, want %v as before", got, ends)
	}
	stdout, stderr, code = w.replay("--to", "earliest", "--execute")
	if code != 0 {
		t.Fatalf("replay --to earliest --execute = exit %d: %s%s", code, stdout, stderr)
	}
	for part, end := range ends {
		row := fmt.Sprintf("%d  %d  0", part, end)
		if !strings.Contains(strings.Join(strings.Fields(stdout), "  "), row) {
			t.Errorf("replay output:\n%s\nwant a row %q (partition, now, after)", stdout, row)
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
// be reset under them; replay waits for them as long as --wait, says who
// they are, and changes nothing: not the offsets, nor the member's hold
// on its partitions.
func TestReplayRefusesWithLiveMember(t *testing.T) {
	w := newWorld(t, 2)
	w.publishFile(lines([]doc{{Key: w.key("a"), Version: 1, Chunks: []string{"x"}}}))
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	before := w.groupOffsets()
	stdout, stderr, code := w.replay("--to", "earliest")
	if code != 0 || !strings.Contains(stdout, "the group has 1 live member(s); --execute waits up to 1m0s") {
		t.Errorf("replay plan with a live member = exit %d:\n%s%s\nwant the member it would wait for", code, stdout, stderr)
	}
	stdout, stderr, code = w.replay("--to", "earliest", "--execute", "--wait", "3s")
	if code != 4 || !strings.Contains(stderr, "has 1 live member(s)") || !strings.Contains(stderr, "stop every `projector run`") ||
		!strings.Contains(stderr, "nothing was reset") {
		t.Errorf("replay --execute with a live member = exit %d, stderr %q; want exit 4 saying 1 live member must be stopped", code, stderr)
	}
	if !strings.Contains(stdout, "waiting up to 3s for the group's members to leave") {
		t.Errorf("replay --execute with a live member printed %q, want it to say it waits", stdout)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("committed offsets = %v after a refused replay, want %v", got, before)
	}
	m := p.metrics()
	if got := m[`projector_partitions_owned{topic="`+w.topic+`"}`]; got != 2 {
		t.Errorf("the live member owns %v partitions after the refused replay, want its 2", got)
	}
	p.stop()
}

// TestReplayWaitsForStoppedStaticMembers: a static member (as the
// StatefulSet runs them) sends no LeaveGroup when it stops, so right after
// scaling to zero the group still has it, until its session times out.
// replay --execute waits for that, and resets once the broker dropped it;
// a static member still listed after its session timeout is running, and
// replay neither removes it nor resets under it (issue 28:
// --remove-static-members removed running members).
func TestReplayWaitsForStoppedStaticMembers(t *testing.T) {
	w := newWorld(t, 1)
	w.produce(doc{Key: w.key("a"), Version: 1, Chunks: []string{"x"}}.record())
	static := []string{"--group-instance-id", w.group + "-0", "--session-timeout", "6s"}
	p := w.start(nil, static...)
	w.waitDrained(p, 2*time.Minute)

	// Running: listed after its whole session timeout, so never removed.
	before := w.groupOffsets()
	_, stderr, code := w.replay("--to", "earliest", "--execute", "--wait", "10s")
	if code != 4 || !strings.Contains(stderr, w.group+"-0 (static)") || !strings.Contains(stderr, "give --wait longer than that") {
		t.Fatalf("replay --execute beside a running static member = exit %d, %q; want 4 naming it", code, stderr)
	}
	if got := w.groupOffsets(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("committed = %v after a refused replay, want %v", got, before)
	}
	m := p.metrics()
	if got := m[`projector_partition_revocations_total{how="lost",topic="`+w.topic+`"}`]; got != 0 {
		t.Errorf("the running static member lost its partition %v times, want never", got)
	}
	if _, stderr, code := w.replay("--to", "earliest", "--execute", "--remove-static-members"); code != 2 || !strings.Contains(stderr, "--remove-static-members is gone") {
		t.Errorf("--remove-static-members = exit %d, %q; want 2 saying it is gone", code, stderr)
	}

	// Stopped: the broker drops it when its session times out.
	p.stop()
	stdout, _, code := w.replay("--to", "earliest")
	if code != 0 || !strings.Contains(stdout, w.group+"-0 (static) on") || !strings.Contains(stdout, "leaves when its session times out") {
		t.Errorf("replay plan after a static member stopped = exit %d:\n%s\nwant it named as the member waited for", code, stdout)
	}
	stdout, stderr, code = w.replay("--to", "earliest", "--execute", "--wait", "30s")
	if code != 0 || !strings.Contains(stdout, "reset the offsets of group "+w.group) {
		t.Fatalf("replay --execute --wait 30s after a static member stopped = exit %d:\n%s%s", code, stdout, stderr)
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
	if _, stderr, code := w.replay("--to", at.Format(time.RFC3339Nano), "--execute"); code != 0 {
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
		{"an offset on one partition", []string{"--to", "1", "--partitions", "0", "--execute"}, map[int32]int64{0: 1, 1: want[1]}, ""},
		{"past the end is clamped", []string{"--to", "999999", "--partitions", "1", "--execute"}, map[int32]int64{0: 1, 1: ends[1]}, "offset 999999 is outside the partition's range"},
		{"earliest on every partition", []string{"--to", "earliest", "--partitions", "0,1", "--execute"}, map[int32]int64{0: 0, 1: 0}, ""},
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

	for _, args := range [][]string{{}, {"--to", "yesterday"}, {"--to", "-3"}, {"--to", "earliest", "--partitions", "7", "--execute"}, {"--to", "earliest", "--partitions", "x"}} {
		if _, stderr, code := w.replay(args...); code != 2 {
			t.Errorf("replay %v = exit %d (%s), want 2", args, code, strings.TrimSpace(stderr))
		}
	}
}
