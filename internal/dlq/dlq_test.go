package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/project"
)

func letter(key, value string, headers ...kgo.RecordHeader) project.DeadLetter {
	return project.DeadLetter{
		Record:  &kgo.Record{Topic: "documents", Partition: 3, Offset: 42, Key: []byte(key), Value: []byte(value), Headers: headers},
		TopicID: project.TopicID{0xab, 1},
		Reason:  "too_large", Detail: "the record value has many bytes",
	}
}

func TestRecordFitsTheTopic(t *testing.T) {
	const limit = 4096
	big := strings.Repeat("v", 10_000)
	tests := []struct {
		name      string
		l         project.DeadLetter
		truncated string
		wantValue string
		wantKey   string
		// wantOrigin is whether the original header x-origin is kept.
		wantOrigin bool
	}{
		{"small stays whole", letter("k", "small", kgo.RecordHeader{Key: "x-origin", Value: []byte("o")}), "", "small", "k", true},
		{"large value is cut", letter("k", big, kgo.RecordHeader{Key: "x-origin", Value: []byte("o")}), "value", "", "k", true},
		{"large headers are dropped", letter("k", big, kgo.RecordHeader{Key: "x-origin", Value: []byte(big)}), "value,headers", "", "k", false},
		{"large key is cut last", letter(big, big), "value,key", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Record("dlq", tt.l, limit)
			if got := size(r); got > limit-batchOverhead {
				t.Errorf("size = %d, want at most %d", got, limit-batchOverhead)
			}
			if got := header(r, HeaderTruncated); got != tt.truncated {
				t.Errorf("truncated header = %q, want %q", got, tt.truncated)
			}
			src := tt.l.Record
			if tt.truncated == "" {
				if string(r.Value) != tt.wantValue || string(r.Key) != tt.wantKey {
					t.Errorf("key/value = %q/%q, want %q/%q", r.Key, r.Value, tt.wantKey, tt.wantValue)
				}
			} else {
				if !strings.HasPrefix(string(src.Value), string(r.Value)) || !strings.HasPrefix(string(src.Key), string(r.Key)) {
					t.Errorf("cut key/value are not prefixes of the original")
				}
				if got, want := header(r, HeaderOriginalValueBytes), strconv.Itoa(len(src.Value)); got != want {
					t.Errorf("original value bytes = %q, want %q", got, want)
				}
			}
			if got := header(r, "x-origin") != ""; got != tt.wantOrigin {
				t.Errorf("original header kept = %v, want %v", got, tt.wantOrigin)
			}
			for h, want := range map[string]string{HeaderReason: "too_large", HeaderSourceTopic: "documents", HeaderSourcePartition: "3",
				HeaderSourceOffset: "42", HeaderSourceTopicID: "qwEAAAAAAAAAAAAAAAAAAA"} {
				if got := header(r, h); got != want {
					t.Errorf("header %s = %q, want %q", h, got, want)
				}
			}
		})
	}
}

// A letter whose topic id the broker did not give says nothing of it:
// redrive then checks the key alone.
func TestRecordWithoutTopicID(t *testing.T) {
	l := letter("k", "v")
	l.TopicID = project.TopicID{}
	for _, h := range Record("dlq", l, 4096).Headers {
		if h.Key == HeaderSourceTopicID {
			t.Errorf("header %s = %q, want none for an unknown topic id", h.Key, h.Value)
		}
	}
}

// fakeProducer answers every produce with err, and refuses a record whose
// value is over maxValue bytes as the broker does one too large for the
// topic even compressed.
type fakeProducer struct {
	err      error
	maxValue int
	sent     []*kgo.Record
}

func (f *fakeProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		err := f.err
		if err == nil && f.maxValue > 0 && len(r.Value) > f.maxValue {
			err = kerr.MessageTooLarge
		}
		if err == nil {
			f.sent = append(f.sent, r)
		}
		out[i] = kgo.ProduceResult{Record: r, Err: err}
	}
	return out
}

func TestSendClassifiesProduceErrors(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		permanent bool
	}{
		{"acknowledged", nil, false},
		{"record over the client's batch limit", fmt.Errorf("%w (uncompressed_bytes=2097440)", kerr.MessageTooLarge), true},
		{"batch refused by the broker", kerr.RecordListTooLarge, true},
		{"topic denied", kerr.TopicAuthorizationFailed, true},
		{"topic missing, may come back", kerr.UnknownTopicOrPartition, false},
		{"broker not answering", errors.New("dial tcp 127.0.0.1:9092: connect: connection refused"), false},
		{"cancelled", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProducer{err: tt.err}
			w := New(p, p, Config{Topic: "dlq", MaxMessageBytes: 4096}, prometheus.NewRegistry())
			err := w.Send(context.Background(), []project.DeadLetter{letter("k", "v")})
			if (err != nil) != (tt.err != nil) {
				t.Fatalf("Send = %v, want an error: %v", err, tt.err != nil)
			}
			_, got := errors.AsType[*project.PermanentError](err)
			if got != tt.permanent {
				t.Errorf("permanent = %v (%v), want %v", got, err, tt.permanent)
			}
		})
	}
}

func TestSendLargeLetters(t *testing.T) {
	const limit = 4096
	tests := []struct {
		name string
		// value is the letter's value; the large producer takes values
		// of up to 10,000 bytes (they compress below the topic's limit).
		value     string
		wantWhole bool
		wantLarge bool
	}{
		{"fits the topic", "small", true, false},
		{"compresses below the limit", strings.Repeat("v", 9000), true, true},
		{"does not fit even compressed", strings.Repeat("v", 20_000), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			small, large := &fakeProducer{}, &fakeProducer{maxValue: 10_000}
			w := New(small, large, Config{Topic: "dlq", MaxMessageBytes: limit}, prometheus.NewRegistry())
			if err := w.Send(context.Background(), []project.DeadLetter{letter("k", tt.value)}); err != nil {
				t.Fatal(err)
			}
			sent := append(append([]*kgo.Record{}, small.sent...), large.sent...)
			if len(sent) != 1 {
				t.Fatalf("sent %d records, want 1", len(sent))
			}
			r := sent[0]
			if got := string(r.Value) == tt.value; got != tt.wantWhole {
				t.Errorf("whole = %v (%d of %d bytes), want %v", got, len(r.Value), len(tt.value), tt.wantWhole)
			}
			if got := len(large.sent) == 1; got != tt.wantLarge {
				t.Errorf("sent alone by the large producer = %v, want %v", got, tt.wantLarge)
			}
			wantCut := 0.0
			if !tt.wantWhole {
				wantCut = 1
				if size(r) > limit-batchOverhead {
					t.Errorf("cut letter has %d bytes, want at most %d", size(r), limit-batchOverhead)
				}
			}
			if got := testutil.ToFloat64(w.truncated); got != wantCut {
				t.Errorf("projector_dlq_truncated_total = %v, want %v", got, wantCut)
			}
		})
	}
}
