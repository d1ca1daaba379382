package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/fault"
)

// TestRedrive follows the recipe of docs/operations.md: records are
// dead-lettered for three reasons, the cause of one is fixed, that reason
// is redriven (a dry run first), and only its documents are projected; a
// rerun of the same redrive sends nothing.
func TestRedrive(t *testing.T) {
	w := newWorld(t, 1)
	large := doc{Key: w.key("large"), Version: 1, Chunks: []string{strings.Repeat("l", 3000)}}
	chunky := doc{Key: w.key("chunky"), Version: 1, Chunks: []string{"a", "b", "c"}}
	withCorrelation := large.record()
	withCorrelation.Headers = append(withCorrelation.Headers, kgo.RecordHeader{Key: "correlation-id", Value: []byte("corr-77")})
	w.produce(
		doc{Key: w.key("fine"), Version: 1, Chunks: []string{"fine"}}.record(),
		withCorrelation,
		chunky.record(),
		&kgo.Record{Key: []byte(w.key("garbage")), Value: []byte("not json")},
	)
	limits := []string{"--max-record-bytes", "2000", "--max-chunks", "2"}
	p := w.start(nil, limits...)
	w.waitDrained(p, time.Minute)
	p.stop()
	if got := len(w.deadLetters()); got != 3 {
		t.Fatalf("dead letters = %d, want 3 (too_large, too_many_chunks, not_json)", got)
	}

	// The cause of too_large is fixed: the limit is raised.
	p = w.start(nil, "--max-chunks", "2")
	redrive := func(extra ...string) string {
		t.Helper()
		args := append([]string{"redrive", "--brokers", w.brokers, "--topic", w.topic, "--dlq-topic", w.dlqTopic,
			"--group", w.group + ".redrive"}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("projector %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	before := len(w.records())
	out := redrive("--reason", "too_large", "--dry-run")
	if !strings.Contains(out, "would send partition=0") || !strings.Contains(out, "reason=too_large") ||
		!strings.Contains(out, "would send 1 of 3 dead letters") {
		t.Errorf("dry run printed %q, want the one too_large letter and a summary", out)
	}
	if after := len(w.records()); after != before {
		t.Fatalf("the document topic went from %d to %d records in a dry run, want nothing sent", before, after)
	}
	if out := redrive("--reason", "too_large"); !strings.Contains(out, "sent 1 of 3 dead letters") {
		t.Errorf("redrive printed %q, want 1 of 3 sent", out)
	}
	waitFor(t, time.Minute, "the redriven document to be projected", func() bool { return projected(t, w, large.Key) })
	w.waitDrained(p, time.Minute)
	if projected(t, w, chunky.Key) {
		t.Errorf("%s was projected, but its reason was not redriven", chunky.Key)
	}
	// The position moved past the letter sent and no further: the rerun
	// reads the two letters of other reasons again and sends neither.
	if out := redrive("--reason", "too_large"); !strings.Contains(out, "sent 0 of 2 dead letters") {
		t.Errorf("the rerun printed %q, want nothing sent of the two letters after the one sent", out)
	}
	p.stop()

	// Issue 28: in a group shared by two reasons, a letter of the second
	// before the last one the first sent was passed, and never sent.
	shared := "--group=" + w.group + ".shared"
	if out := redrive(shared, "--reason", "not_json"); !strings.Contains(out, "sent 1 of 3 dead letters") {
		t.Errorf("not_json in a shared group printed %q, want 1 of 3 sent", out)
	}
	if out := redrive(shared, "--reason", "too_many_chunks"); !strings.Contains(out, "sent 1 of 3 dead letters") {
		t.Errorf("too_many_chunks after not_json in the shared group printed %q, want its letter, before not_json's, sent", out)
	}
	if out := redrive(shared, "--reason", "not_json,too_many_chunks"); !strings.Contains(out, "sent 0 of 3 dead letters") ||
		!strings.Contains(out, "passed 2 selected dead letters that an earlier redrive of the group sent") {
		t.Errorf("both reasons in the shared group printed %q, want nothing sent twice", out)
	}

	// What was sent back is the original record: its key, value and the
	// producer's headers, none of the projector's, and where it came from.
	var sent *kgo.Record
	for _, r := range w.records() {
		if string(r.Key) == large.Key && header(r, "projector-redriven-from") != "" {
			sent = r
		}
	}
	if sent == nil {
		t.Fatal("no redriven record in the document topic")
	}
	if string(sent.Value) != string(withCorrelation.Value) || header(sent, "correlation-id") != "corr-77" ||
		header(sent, dlq.HeaderReason) != "" || header(sent, dlq.HeaderSourceOffset) != "" {
		t.Errorf("redriven record: value equal %v, headers %v; want the original value and headers and none of the projector's",
			string(sent.Value) == string(withCorrelation.Value), sent.Headers)
	}
	if got := len(w.deadLetters()); got != 3 {
		t.Errorf("dead letters = %d after the redrive, want still 3", got)
	}
}

// projected reports whether the relational store holds key as live.
func projected(t *testing.T, w *world, key string) bool {
	t.Helper()
	var n int
	err := w.pg.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()+
		" WHERE document_key = $1 AND status = 'live'", key).Scan(&n)
	if err != nil {
		return false
	}
	return n == 1
}

// TestRedriveCutLetter redrives a dead letter that was cut to fit a small
// dead-letter topic: what goes back is the whole record, read again at its
// source position, not the cut value.
func TestRedriveCutLetter(t *testing.T) {
	w := newWorld(t, 1)
	ctx := context.Background()
	if _, err := w.adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("4096")}, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 15000)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	big := doc{Key: w.key("big"), Version: 1, Chunks: []string{base64.StdEncoding.EncodeToString(noise)}}
	w.produce(big.record())
	p := w.start(nil, "--max-record-bytes", "8000")
	w.waitDrained(p, time.Minute)
	p.stop()
	letters := w.deadLetters()
	if len(letters) != 1 || header(letters[0], dlq.HeaderTruncated) == "" {
		t.Fatalf("%d dead letters, want one cut letter (header %s)", len(letters), dlq.HeaderTruncated)
	}

	p = w.start(nil)
	_, stderr, code := w.cli("redrive", "--brokers", w.brokers, "--topic", w.topic, "--dlq-topic", w.dlqTopic,
		"--group", w.group+".redrive", "--reason", "too_large")
	if code != 0 {
		t.Fatalf("projector redrive: exit %d\n%s", code, stderr)
	}
	waitFor(t, time.Minute, "the whole redriven document to be projected", func() bool { return projected(t, w, big.Key) })
	p.stop()

	// The document topic is deleted and created again, and its offset 0
	// now holds another record: the letter's source is gone, whatever
	// the offset says, so nothing is sent and the summary says why.
	if _, err := w.adm.DeleteTopics(ctx, w.topic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the document topic to be created again", func() bool {
		r, err := w.adm.CreateTopic(ctx, 1, 1, nil, w.topic)
		return err == nil && r.Err == nil
	})
	other := doc{Key: w.key("other"), Version: 1, Chunks: []string{"unrelated"}}
	// A new client: the world's own still knows the deleted topic's id.
	w.produceTo(0, other.record())
	stdout, stderr, code := w.cli("redrive", "--brokers", w.brokers, "--topic", w.topic, "--dlq-topic", w.dlqTopic,
		"--group", w.group+".redrive-again", "--reason", "too_large")
	if code != 0 || !strings.Contains(stdout, "sent 0 of 1") || !strings.Contains(stdout, "skipped 1 cut dead letters") {
		t.Errorf("redrive after the topic was created again: exit %d, %q; want nothing sent and one skipped\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "created again") {
		t.Errorf("the log does not say the topic was created again:\n%s", stderr)
	}
	if recs := w.records(); len(recs) != 1 || string(recs[0].Key) != other.Key {
		t.Errorf("the document topic holds %d records, want only %s", len(recs), other.Key)
	}
}

// redriveArgs are the flags of `projector redrive` for this world, with
// its own position group unless extra names one.
func (w *world) redriveArgs(extra ...string) []string {
	return append([]string{"redrive", "--brokers", w.brokers, "--topic", w.topic, "--dlq-topic", w.dlqTopic}, extra...)
}

// TestRedriveTombstoneAfterRevival is issue 23's log: X v1; a tombstone of
// X that is dead-lettered (fence_mismatch: the index kept X's points)
// after the relational store committed the withdrawal; X v2 revives X.
// Redriving the tombstone, by a redrive killed after publishing and run
// again, sends it twice; judged at its original place both copies are
// stale, X v2 stays in every store, and a replay from the start and from
// the middle changes nothing.
func TestRedriveTombstoneAfterRevival(t *testing.T) {
	w := newWorld(t, 1)
	x := w.key("x")
	w.produce(doc{Key: x, Version: 1, Chunks: []string{"one", "two"}}.record())
	p := w.start(nil)
	w.waitDrained(p, time.Minute)
	p.stop()

	w.produce(doc{Key: x, Tombstone: true}.record())
	p = w.start([]string{"PROJECTOR_FAULTS=drop-index=" + x}, "--fence-retries", "1")
	w.waitDrained(p, time.Minute)
	p.stop()
	letters := w.deadLetters()
	if len(letters) != 1 || letters[0].Value != nil || header(letters[0], dlq.HeaderReason) != "fence_mismatch" {
		t.Fatalf("dead letters = %d, want X's tombstone with reason fence_mismatch", len(letters))
	}
	if header(letters[0], dlq.HeaderSourceTopicID) == "" {
		t.Errorf("the dead letter has no %s", dlq.HeaderSourceTopicID)
	}

	w.produce(doc{Key: x, Version: 2, Chunks: []string{"revived"}}.record())
	p = w.start(nil)
	w.waitDrained(p, time.Minute)
	if !projected(t, w, x) {
		t.Fatal("X v2 is not live after its revival")
	}
	revived := w.snapshot()

	// The first redrive dies between publishing and committing.
	group := "--group=" + w.group + ".redrive"
	_, stderr, code := w.cliEnv([]string{"PROJECTOR_FAULTS=after-redrive-publish=exit:1"},
		w.redriveArgs(group, "--reason", "fence_mismatch", "--batch", "1")...)
	if code != fault.ExitCode {
		t.Fatalf("redrive with a crash after publishing: exit %d, want %d\n%s", code, fault.ExitCode, stderr)
	}
	out, stderr, code := w.cli(w.redriveArgs(group, "--reason", "fence_mismatch")...)
	if code != 0 || !strings.Contains(out, "sent 1 of 1") {
		t.Fatalf("redrive rerun: exit %d, %q, want the tombstone sent again\n%s", code, out, stderr)
	}
	w.waitDrained(p, time.Minute)
	metrics := p.metrics()
	p.stop()
	if got := metrics[`projector_records_total{outcome="stale"}`]; got != 2 {
		t.Errorf("stale records = %v, want the two redriven copies of the tombstone", got)
	}
	if got := metrics[`projector_records_total{outcome="withdrawn"}`]; got != 0 {
		t.Errorf("withdrawn records = %v, want none", got)
	}
	requireSameSnapshot(t, w.snapshot(), revived)
	w.requireClean(1)

	// Replay is a normal path: from the start and from X v2, every event
	// is read after the one that last changed X, and changes nothing.
	for _, to := range []string{"earliest", "2"} {
		if stdout, stderr, code := w.replay("--to", to, "--execute"); code != 0 {
			t.Fatalf("replay --to %s = exit %d: %s%s", to, code, stdout, stderr)
		}
		p := w.start(nil)
		w.waitDrained(p, time.Minute)
		p.stop()
		requireSameSnapshot(t, w.snapshot(), revived)
	}
}

// TestRedrivePositions: a narrowed redrive leaves the rest of its reason to
// a wider one, in its own default group and in a group given to both; the
// projector's PROJECTOR_GROUP, set as the shipped ConfigMap sets it, is
// never the redrive's, and naming the projector's group is refused before
// anything is sent.
func TestRedrivePositions(t *testing.T) {
	w := newWorld(t, 1)
	for i := range 5 {
		w.produce(&kgo.Record{Key: []byte(w.key(fmt.Sprint("bad-", i))), Value: []byte("not json")})
	}
	p := w.start(nil)
	w.waitDrained(p, time.Minute)
	p.stop()
	if got := len(w.deadLetters()); got != 5 {
		t.Fatalf("dead letters = %d, want 5", got)
	}
	projectorPosition := w.groupOffsets()
	configMap := []string{"PROJECTOR_GROUP=" + w.group}
	sent := func(extra ...string) string {
		t.Helper()
		out, stderr, code := w.cliEnv(configMap, w.redriveArgs(extra...)...)
		if code != 0 {
			t.Fatalf("redrive %v: exit %d\n%s", extra, code, stderr)
		}
		return out
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"--reason", "not_json", "--to-offset", "3"}, "sent 3 of 5 dead letters"},
		{[]string{"--reason", "not_json", "--to-offset", "3"}, "sent 0 of 2 dead letters"},
		{[]string{"--reason", "not_json"}, "sent 5 of 5 dead letters"},
		{[]string{"--reason", "not_json", "--group", w.group + ".shared", "--to-offset", "3"}, "sent 3 of 5"},
		{[]string{"--reason", "not_json", "--group", w.group + ".shared"}, "sent 2 of 2"},
		{[]string{"--reason", "not_json", "--group", w.group + ".shared"}, "sent 0 of 0"},
	} {
		if out := sent(step.args...); !strings.Contains(out, step.want) {
			t.Errorf("redrive %v printed %q, want %q", step.args, out, step.want)
		}
	}
	if got := w.groupOffsets(); !maps.Equal(got, projectorPosition) {
		t.Errorf("the projector's group moved from %v to %v", projectorPosition, got)
	}
	committed, err := w.adm.FetchOffsets(context.Background(), w.group)
	if err != nil {
		t.Fatal(err)
	}
	if topics := committed.Offsets().TopicsSet().Topics(); !slices.Equal(topics, []string{w.topic}) {
		t.Errorf("the projector's group holds positions in %v, want only %s", topics, w.topic)
	}

	before := len(w.records())
	_, stderr, code := w.cli(w.redriveArgs("--group", w.group)...)
	if code != 2 || !strings.Contains(stderr, "another consumer's") {
		t.Errorf("redrive in the projector's group: exit %d, %q; want 2 and why", code, stderr)
	}
	if after := len(w.records()); after != before {
		t.Errorf("the document topic went from %d to %d records, want nothing sent", before, after)
	}
}
