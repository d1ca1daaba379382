package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
)

// TestDeadLetters publishes one record of every kind of bad input between
// good ones: each bad record must reach the dead-letter topic unchanged
// with its reason and origin, the good ones must be projected, and every
// offset must be committed.
func TestDeadLetters(t *testing.T) {
	w := newWorld(t, 1)
	vector3 := `[0.1,0.2,0.3]`
	bad := []struct {
		reason string
		key    []byte
		value  string
	}{
		{"not_json", []byte("k-json"), `{"document_key": "k-json", "version": 1,`},
		{"not_object", []byte("k-array"), `[1, 2, 3]`},
		{"missing_field", []byte("k-missing"), `{"document_key":"k-missing","chunks":[]}`},
		{"wrong_type", []byte("k-type"), `{"document_key":"k-type","version":"1","chunks":[]}`},
		{"invalid_version", []byte("k-version"), `{"document_key":"k-version","version":0,"chunks":[]}`},
		{"key_mismatch", []byte("k-one"), `{"document_key":"k-other","version":1,"chunks":[]}`},
		{"too_large", []byte("k-large"), `{"document_key":"k-large","version":1,"text":"` + strings.Repeat("a", 5000) + `"}`},
		{"too_many_chunks", []byte("k-chunks"), `{"document_key":"k-chunks","version":1,"chunks":[` + strings.TrimSuffix(strings.Repeat(`{"text":"c"},`, 6), ",") + `]}`},
		{"vector_dimension", []byte("k-vector"), `{"document_key":"k-vector","version":1,"chunks":[{"text":"c","vector":` + vector3 + `}]}`},
		{"invalid_utf8", []byte("k-utf8"), "{\"document_key\":\"k-utf8\",\"version\":1,\"title\":\"\xff\xfe\",\"chunks\":[]}"},
		{"nul_character", []byte("k-nul"), `{"document_key":"k-nul","version":1,"title":"a\u0000b","chunks":[]}`},
		{"missing_key", nil, `{"document_key":"k-nokey","version":1,"chunks":[]}`},
		{"invalid_op", []byte("k-op"), `{"document_key":"k-op","version":1,"op":"delete"}`},
	}
	var recs []*kgo.Record
	good := 0
	for i, b := range bad {
		recs = append(recs, doc{Key: w.key(fmt.Sprintf("good-%d", i)), Version: 1, Chunks: []string{"fine"}}.record())
		good++
		recs = append(recs, &kgo.Record{Key: b.key, Value: []byte(b.value), Headers: []kgo.RecordHeader{{Key: "x-origin", Value: []byte(b.reason)}}})
	}
	w.produce(recs...)

	p := w.start(nil, "--max-record-bytes", "4096", "--max-chunks", "5")
	w.waitDrained(p, time.Minute)
	metrics := p.metrics()
	p.stop()
	w.committedEqualsEnd()

	letters := w.deadLetters()
	if len(letters) != len(bad) {
		t.Fatalf("dead letters = %d, want %d", len(letters), len(bad))
	}
	byOrigin := map[string]*kgo.Record{}
	for _, l := range letters {
		byOrigin[header(l, "x-origin")] = l
	}
	for _, b := range bad {
		l := byOrigin[b.reason]
		if l == nil {
			t.Errorf("%s: no dead letter carries the original header x-origin=%s", b.reason, b.reason)
			continue
		}
		if got := header(l, dlq.HeaderReason); got != b.reason {
			t.Errorf("%s: reason header = %q (detail %q), want %q", b.reason, got, header(l, dlq.HeaderDetail), b.reason)
		}
		if header(l, dlq.HeaderDetail) == "" {
			t.Errorf("%s: empty detail header", b.reason)
		}
		if string(l.Value) != b.value || string(l.Key) != string(b.key) {
			t.Errorf("%s: dead letter key/value = %q/%.60q, want the original %q/%.60q", b.reason, l.Key, l.Value, b.key, b.value)
		}
		if header(l, dlq.HeaderSourceTopic) != w.topic || header(l, dlq.HeaderSourcePartition) != "0" {
			t.Errorf("%s: source = %s/%s, want %s/0", b.reason, header(l, dlq.HeaderSourceTopic), header(l, dlq.HeaderSourcePartition), w.topic)
		}
		if _, err := strconv.ParseInt(header(l, dlq.HeaderSourceOffset), 10, 64); err != nil {
			t.Errorf("%s: source offset header %q is not a number", b.reason, header(l, dlq.HeaderSourceOffset))
		}
		if got := metrics[`projector_dlq_total{reason="`+b.reason+`"}`]; got != 1 {
			t.Errorf("projector_dlq_total{reason=%q} = %v, want 1", b.reason, got)
		}
	}
	var ledger int
	if err := w.pg.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize()).Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != good {
		t.Errorf("ledger rows = %d, want %d (the good records)", ledger, good)
	}
}

// TestDeadLetterTopicUnavailable removes the dead-letter topic under a
// running service: a bad record then cannot be dead-lettered, so nothing
// after it may be committed, until the topic is back.
func TestDeadLetterTopicUnavailable(t *testing.T) {
	w := newWorld(t, 1)
	p := w.start(nil)
	w.produce(doc{Key: w.key("before"), Version: 1, Chunks: []string{"a"}}.record())
	w.waitDrained(p, time.Minute)
	ctx := context.Background()
	if _, err := w.adm.DeleteTopics(ctx, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	w.produce(&kgo.Record{Key: []byte("garbage"), Value: []byte("not json")},
		doc{Key: w.key("after"), Version: 1, Chunks: []string{"b"}}.record())

	waitFor(t, 30*time.Second, "readyz to report the dead-letter topic", func() bool {
		code, body := p.get("/readyz")
		return code == 503 && strings.Contains(body, "dead-letter topic")
	})
	time.Sleep(3 * time.Second)
	if lag, err := w.lag(); err != nil || lag != 2 {
		t.Fatalf("lag while the dead-letter topic is gone = %d (%v), want 2: nothing committed past the bad record", lag, err)
	}

	if _, err := w.adm.CreateTopic(ctx, 1, 1, nil, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	w.waitDrained(p, time.Minute)
	p.stop()
	letters := w.deadLetters()
	if len(letters) != 1 || string(letters[0].Value) != "not json" || header(letters[0], dlq.HeaderReason) != "not_json" {
		t.Fatalf("dead letters = %d, want the one bad record with reason not_json", len(letters))
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
