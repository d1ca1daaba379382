package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
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
	if out := redrive("--reason", "too_large"); !strings.Contains(out, "sent 0 of 0 dead letters") {
		t.Errorf("the rerun printed %q, want nothing sent", out)
	}
	p.stop()

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
}
