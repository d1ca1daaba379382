package e2e

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
)

// TestOversizedRecords publishes, among ordinary documents, the records
// that used to stop a partition or spread over the stores' limits: a 2 MiB
// compressible record (lz4, as a producer sends it), a 6 MiB one that does
// not compress, an event of 100,000 small chunks, and an event whose chunk
// payloads (the title is copied into every point) come to about 40 MiB for
// one upsert. The first three are dead-lettered with their reason: the
// compressible one whole (it compresses below the dead-letter topic's
// limit), the incompressible one cut to fit, with headers that say so; the
// fourth is projected; every other document is projected and the group's
// lag reaches zero.
func TestOversizedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes records of several MiB")
	}
	w := newWorld(t, 1)
	ctx := context.Background()
	// The document topic takes what producers send; the broker's own
	// default (1 MiB) would refuse the 6 MiB record at the producer.
	if _, err := w.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("16777216")}}, w.topic); err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 6<<20)
	for i := range noise {
		noise[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rnd.IntN(62)]
	}
	tiny := make([]string, 100_000)
	for i := range tiny {
		tiny[i] = "c"
	}
	bigTitle := doc{Key: w.key("wide"), Version: 1, Title: strings.Repeat("t", 400<<10), Chunks: make([]string, 100)}
	for i := range bigTitle.Chunks {
		bigTitle.Chunks[i] = "chunk " + strconv.Itoa(i)
	}
	special := []struct {
		name   string
		rec    *kgo.Record
		reason string // "" when it must be projected
		cut    bool   // whether its dead letter is cut
	}{
		{"compressible", doc{Key: w.key("compressible"), Version: 1, Chunks: []string{strings.Repeat("lorem ipsum ", (2<<20)/12+1)}}.record(), "too_large", false},
		{"incompressible", doc{Key: w.key("incompressible"), Version: 1, Chunks: []string{string(noise)}}.record(), "too_large", true},
		{"many_chunks", doc{Key: w.key("many"), Version: 1, Chunks: tiny}.record(), "too_many_chunks", false},
		{"wide", bigTitle.record(), "", false},
	}
	var recs []*kgo.Record
	var good []string
	for i, s := range special {
		k := w.key("good-" + strconv.Itoa(i))
		good = append(good, k)
		recs = append(recs, doc{Key: k, Version: 1, Chunks: []string{"fine", "also fine"}}.record(), s.rec)
		s.rec.Headers = []kgo.RecordHeader{{Key: "x-origin", Value: []byte(s.name)}}
		if s.reason == "" {
			good = append(good, string(s.rec.Key))
		}
	}
	k := w.key("good-last")
	good = append(good, k)
	recs = append(recs, doc{Key: k, Version: 1, Chunks: []string{"last"}}.record())
	for _, r := range recs {
		r.Topic = w.topic
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %q (%d bytes): %v", r.Key, len(r.Value), err)
		}
	}

	p := w.start(nil, "--max-record-bytes", strconv.Itoa(2<<20))
	w.waitDrained(p, 3*time.Minute)
	metrics := p.metrics()
	p.stop()
	w.committedEqualsEnd()

	byOrigin := map[string]*kgo.Record{}
	for _, l := range w.deadLetters() {
		byOrigin[header(l, "x-origin")] = l
	}
	for _, s := range special {
		l := byOrigin[s.name]
		if s.reason == "" {
			if l != nil {
				t.Errorf("%s: dead-lettered with reason %q (%s), want it projected", s.name, header(l, dlq.HeaderReason), header(l, dlq.HeaderDetail))
			}
			continue
		}
		if l == nil {
			t.Errorf("%s: no dead letter, want one with reason %s", s.name, s.reason)
			continue
		}
		if got := header(l, dlq.HeaderReason); got != s.reason {
			t.Errorf("%s: reason %q (%s), want %q", s.name, got, header(l, dlq.HeaderDetail), s.reason)
		}
		if got, want := header(l, dlq.HeaderSourceTopic), w.topic; got != want {
			t.Errorf("%s: source topic %q, want %q", s.name, got, want)
		}
		if _, err := strconv.ParseInt(header(l, dlq.HeaderSourceOffset), 10, 64); err != nil {
			t.Errorf("%s: source offset %q is not a number", s.name, header(l, dlq.HeaderSourceOffset))
		}
		whole := string(l.Value) == string(s.rec.Value)
		cut := header(l, dlq.HeaderTruncated)
		switch {
		case !s.cut && (!whole || cut != ""):
			t.Errorf("%s: dead letter of %d bytes, truncated %q; want the whole value of %d bytes", s.name, len(l.Value), cut, len(s.rec.Value))
		case s.cut && (cut != "value" || whole || !strings.HasPrefix(string(s.rec.Value), string(l.Value))):
			t.Errorf("%s: dead letter of %d bytes, truncated %q; want a prefix of the %d bytes with truncated=value",
				s.name, len(l.Value), cut, len(s.rec.Value))
		case s.cut && header(l, dlq.HeaderOriginalValueBytes) != strconv.Itoa(len(s.rec.Value)):
			t.Errorf("%s: original value bytes header %q, want %d", s.name, header(l, dlq.HeaderOriginalValueBytes), len(s.rec.Value))
		}
	}
	if got := metrics[`projector_dlq_total{reason="too_large"}`]; got != 2 {
		t.Errorf("projector_dlq_total{reason=too_large} = %v, want 2", got)
	}
	if got := metrics[`projector_dlq_total{reason="too_many_chunks"}`]; got != 1 {
		t.Errorf("projector_dlq_total{reason=too_many_chunks} = %v, want 1", got)
	}
	if got := metrics["projector_dlq_truncated_total"]; got != 1 {
		t.Errorf("projector_dlq_truncated_total = %v, want 1 (the incompressible record)", got)
	}

	var projected int
	if err := w.pg.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{w.schema, "ledger"}.Sanitize()+" WHERE document_key = ANY($1)", good).Scan(&projected); err != nil {
		t.Fatal(err)
	}
	if projected != len(good) {
		t.Errorf("ledger rows of the documents to project = %d, want %d", projected, len(good))
	}
	n, err := w.qd.Count(ctx, &qdrant.CountPoints{CollectionName: w.collection, Exact: qdrant.PtrOf(true),
		Filter: &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", bigTitle.Key)}}})
	if err != nil {
		t.Fatal(err)
	}
	if n != uint64(len(bigTitle.Chunks)) {
		t.Errorf("index points of %s = %d, want %d", bigTitle.Key, n, len(bigTitle.Chunks))
	}
}

// TestDeadLetterTopicSettings checks the dead-letter topic run creates, and
// the warning about an existing one that would delete dead letters soon.
func TestDeadLetterTopicSettings(t *testing.T) {
	ctx := context.Background()
	configOf := func(w *world) map[string]string {
		t.Helper()
		rc, err := w.adm.DescribeTopicConfigs(ctx, w.dlqTopic)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rc.On(w.dlqTopic, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range r.Configs {
			if c.Value != nil {
				out[c.Key] = *c.Value
			}
		}
		return out
	}
	tests := []struct {
		name     string
		existing map[string]*string // nil: the topic is missing
		args     []string
		want     map[string]string
		warning  string // "" when none is due
	}{
		{"created, kept for ever", nil, []string{"--max-record-bytes", "2097152"},
			map[string]string{"retention.ms": "-1", "max.message.bytes": strconv.Itoa(2097152 + 64<<10)}, ""},
		{"created, with a retention", nil, []string{"--dlq-retention", "2160h"},
			map[string]string{"retention.ms": strconv.Itoa(90 * 24 * 3600 * 1000)}, ""},
		{"existing, short retention", map[string]*string{"retention.ms": kadm.StringPtr("86400000")}, nil,
			map[string]string{"retention.ms": "86400000"}, "the dead-letter topic deletes dead letters within days"},
		{"existing, bounded in bytes", map[string]*string{"retention.ms": kadm.StringPtr("-1"), "retention.bytes": kadm.StringPtr("1073741824")}, nil,
			map[string]string{"retention.bytes": "1073741824"}, "the dead-letter topic deletes its oldest dead letters beyond retention.bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, 1)
			if tt.existing != nil {
				if _, err := w.adm.CreateTopic(ctx, 1, 1, tt.existing, w.dlqTopic); err != nil {
					t.Fatal(err)
				}
			}
			w.produce(doc{Key: w.key("a"), Version: 1, Chunks: []string{"a"}}.record())
			p := w.start(nil, tt.args...)
			w.waitDrained(p, time.Minute)
			p.stop()
			got := configOf(w)
			for k, want := range tt.want {
				if got[k] != want {
					t.Errorf("dead-letter topic %s = %q, want %q", k, got[k], want)
				}
			}
			for _, msg := range []string{"the dead-letter topic deletes dead letters within days", "the dead-letter topic deletes its oldest dead letters beyond retention.bytes"} {
				if got, want := strings.Contains(p.log.String(), msg), msg == tt.warning; got != want {
					t.Errorf("warned %q = %v, want %v", msg, got, want)
				}
			}
		})
	}
}

// TestDeadLetterRefusedHalts gives the service a dead-letter topic that
// refuses a letter for good: a compacted topic takes no record without a
// key, and a record without a key is bad input. The partition must halt
// with the reason on /readyz and in the metrics, rather than retry for
// ever, and nothing after the record may be committed.
func TestDeadLetterRefusedHalts(t *testing.T) {
	w := newWorld(t, 1)
	ctx := context.Background()
	if _, err := w.adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	w.produce(doc{Key: w.key("before"), Version: 1, Chunks: []string{"a"}}.record(),
		&kgo.Record{Value: []byte(`{"document_key":"k-nokey","version":1,"chunks":[]}`)},
		doc{Key: w.key("after"), Version: 1, Chunks: []string{"b"}}.record())
	p := w.start(nil)
	m := p.waitMetrics(time.Minute, "the partition halted", func(m map[string]float64) bool {
		return m[`projector_partition_halts_total{reason="dead_letter_refused"}`] == 1
	})
	if got := m[`projector_partition_halted{partition="0",topic="`+w.topic+`"}`]; got != 1 {
		t.Errorf("projector_partition_halted = %v, want 1", got)
	}
	code, body := p.get("/readyz")
	if code != 503 || !strings.Contains(body, "dead_letter_refused") || !strings.Contains(body, "INVALID_RECORD") {
		t.Errorf("/readyz = %d %q, want 503 naming dead_letter_refused and the broker's error", code, body)
	}
	p.stop()
	if lag, err := w.lag(); err != nil || lag == 0 {
		t.Errorf("lag = %d (%v), want the refused record and what follows uncommitted", lag, err)
	}
	if !strings.Contains(p.log.String(), "the dead-letter topic is compacted") {
		t.Errorf("no warning about the compacted dead-letter topic in the log")
	}
}
