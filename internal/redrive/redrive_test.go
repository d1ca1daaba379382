package redrive

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
)

func TestSelectionMatch(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	letter := &kgo.Record{Offset: 10, Timestamp: at, Headers: []kgo.RecordHeader{{Key: dlq.HeaderReason, Value: []byte("too_large")}}}
	tests := []struct {
		name string
		sel  Selection
		want bool
	}{
		{"everything", Selection{To: -1}, true},
		{"its reason", Selection{Reasons: []string{"not_json", "too_large"}, To: -1}, true},
		{"another reason", Selection{Reasons: []string{"not_json"}, To: -1}, false},
		{"since its time", Selection{Since: at, To: -1}, true},
		{"since after it", Selection{Since: at.Add(time.Second), To: -1}, false},
		{"until its time", Selection{Until: at, To: -1}, false},
		{"until after it", Selection{Until: at.Add(time.Second), To: -1}, true},
		{"from its offset", Selection{From: 10, To: -1}, true},
		{"from after it", Selection{From: 11, To: -1}, false},
		{"to its offset", Selection{To: 10}, false},
		{"to after it", Selection{To: 11}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.Match(letter); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOriginal(t *testing.T) {
	letter := &kgo.Record{Topic: "documents.dlq", Partition: 2, Offset: 41, Key: []byte("doc-1"), Value: nil, Headers: []kgo.RecordHeader{
		{Key: "correlation-id", Value: []byte("c-1")},
		{Key: dlq.HeaderReason, Value: []byte("invalid_key")},
		{Key: dlq.HeaderDetail, Value: []byte("...")},
		{Key: dlq.HeaderSourceTopic, Value: []byte("documents")},
		{Key: dlq.HeaderSourcePartition, Value: []byte("0")},
		{Key: dlq.HeaderSourceOffset, Value: []byte("7")},
		{Key: HeaderRedrivenFrom, Value: []byte("documents.dlq/0/3")},
		{Key: "x-producer", Value: []byte("crm")},
	}}
	got := Original(letter, "documents")
	if got.Topic != "documents" || string(got.Key) != "doc-1" || got.Value != nil {
		t.Errorf("Original = topic %q, key %q, value %v; want documents, doc-1 and a tombstone's nil value", got.Topic, got.Key, got.Value)
	}
	var keys []string
	for _, h := range got.Headers {
		keys = append(keys, h.Key+"="+string(h.Value))
	}
	want := []string{"correlation-id=c-1", "x-producer=crm", "projector-original-position=documents/0/7", "projector-redriven-from=documents.dlq/2/41"}
	if !slices.Equal(keys, want) {
		t.Errorf("headers = %v, want %v", keys, want)
	}
}

// A letter redriven before and dead-lettered again keeps the place its
// first original had, not the place of the redriven copy.
func TestOriginalKeepsTheFirstPlace(t *testing.T) {
	letter := &kgo.Record{Topic: "documents.dlq", Offset: 9, Key: []byte("doc-1"), Headers: []kgo.RecordHeader{
		{Key: project.HeaderOriginalPosition, Value: []byte("documents/0/1/AAAAAAAAAAAAAAAAAAAAAA")},
		{Key: dlq.HeaderSourceTopic, Value: []byte("documents")},
		{Key: dlq.HeaderSourcePartition, Value: []byte("0")},
		{Key: dlq.HeaderSourceOffset, Value: []byte("5")},
	}}
	var got []string
	for _, h := range Original(letter, "documents").Headers {
		if h.Key == project.HeaderOriginalPosition {
			got = append(got, string(h.Value))
		}
	}
	if want := []string{"documents/0/1/AAAAAAAAAAAAAAAAAAAAAA"}; !slices.Equal(got, want) {
		t.Errorf("original positions = %v, want %v", got, want)
	}
}

// cutLetter is a dead letter of documents/0/4 (topic id 1) cut as cut says.
func cutLetter(key, cut string) *kgo.Record {
	return &kgo.Record{Topic: "documents.dlq", Offset: 2, Key: []byte(key), Value: []byte("{\"docu"), Headers: []kgo.RecordHeader{
		{Key: dlq.HeaderReason, Value: []byte("too_large")},
		{Key: dlq.HeaderSourceTopic, Value: []byte("documents")},
		{Key: dlq.HeaderSourcePartition, Value: []byte("0")},
		{Key: dlq.HeaderSourceOffset, Value: []byte("4")},
		{Key: dlq.HeaderSourceTopicID, Value: []byte(project.TopicID{1}.String())},
		{Key: dlq.HeaderTruncated, Value: []byte(cut)},
	}}
}

// A cut letter is sent whole only when what its source holds now is the
// record that was dead-lettered: the topic is the same incarnation and the
// key is the letter's.
func TestWholeChecksTheSource(t *testing.T) {
	full := `{"document_key":"doc-1","version":1,"text":"all of it"}`
	tests := []struct {
		name   string
		letter *kgo.Record
		key    string
		id     project.TopicID
		want   string // an error substring, or "" to send the whole record
	}{
		{"the same record", cutLetter("doc-1", "value"), "doc-1", project.TopicID{1}, ""},
		{"a cut key, a prefix of the source's", cutLetter("doc-", "value,key"), "doc-1", project.TopicID{1}, ""},
		{"the topic created again", cutLetter("doc-1", "value"), "doc-1", project.TopicID{2}, "created again"},
		{"another key", cutLetter("doc-1", "value"), "doc-2", project.TopicID{1}, "another record"},
		{"a prefix, but the key was not cut", cutLetter("doc-", "value"), "doc-1", project.TopicID{1}, "another record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Topic: "documents", Source: func(_ context.Context, topic string, partition int32, offset int64) (*kgo.Record, project.TopicID, error) {
				if topic != "documents" || partition != 0 || offset != 4 {
					t.Errorf("read %s/%d/%d, want documents/0/4", topic, partition, offset)
				}
				return &kgo.Record{Topic: topic, Offset: offset, Key: []byte(tt.key), Value: []byte(full)}, tt.id, nil
			}}
			out, err := whole(context.Background(), cfg, tt.letter)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("whole = %v, want an error saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Value) != full || string(out.Key) != "doc-1" {
				t.Errorf("sent key %q value %q, want the whole record", out.Key, out.Value)
			}
			if got := header(out, project.HeaderOriginalPosition); got != "documents/0/4/"+(project.TopicID{1}).String() {
				t.Errorf("original position = %q, want the letter's source", got)
			}
		})
	}
}

func TestDefaultGroup(t *testing.T) {
	since := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	base := Config{DLQTopic: DefaultDLQTopic, Topic: DefaultTopic, Selection: Selection{To: -1}}
	tests := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"everything", func(*Config) {}, "projector-redrive.all"},
		{"reasons", func(c *Config) { c.Selection.Reasons = []string{"store_rejected", "too_large"} },
			"projector-redrive.store_rejected,too_large"},
		{"narrowed", func(c *Config) { c.Selection.Reasons = []string{"too_large"}; c.Selection.To = 3 },
			"projector-redrive.too_large.to-offset=3"},
		{"every bound", func(c *Config) {
			c.DLQTopic, c.Topic = "d.dlq", "d"
			c.Selection = Selection{Since: since, Until: since.Add(time.Hour), From: 2, To: 9}
		}, "projector-redrive.all.dlq-topic=d.dlq.topic=d.since=2026-05-01T12:00:00Z.until=2026-05-01T13:00:00Z.from-offset=2.to-offset=9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.edit(&cfg)
			if got := DefaultGroup(cfg); got != tt.want {
				t.Errorf("DefaultGroup = %q, want %q", got, tt.want)
			}
		})
	}
}

// A position keeps the marks of the selections that sent past its
// committed offset, reads back what it wrote, and refuses to grow past
// what a broker keeps of a commit's metadata.
func TestPositionMarks(t *testing.T) {
	tooLarge := Selection{Reasons: []string{"too_large"}, To: -1}
	p := position{committed: 4}.advance(tooLarge, 10, 5)
	if p.committed != 5 || len(p.marks) != 1 || p.marks[0].Below != 10 {
		t.Fatalf("advance = %+v, want committed 5 and a mark of too_large below 10", p)
	}
	md, err := p.metadata()
	if err != nil {
		t.Fatal(err)
	}
	back := parsePosition(5, md)
	sent := &kgo.Record{Offset: 7, Headers: []kgo.RecordHeader{{Key: dlq.HeaderReason, Value: []byte("too_large")}}}
	other := &kgo.Record{Offset: 7, Headers: []kgo.RecordHeader{{Key: dlq.HeaderReason, Value: []byte("not_json")}}}
	if !back.sent(sent) || back.sent(other) {
		t.Errorf("read back from %q: too_large at 7 sent %v, not_json at 7 sent %v; want true, false", md, back.sent(sent), back.sent(other))
	}
	if p := back.advance(Selection{To: -1}, 12, -1); p.committed != 12 || len(p.marks) != 0 {
		t.Errorf("a selection that sent everything: %+v, want committed 12 and no mark", p)
	}
	if p := parsePosition(3, "member-1"); p.committed != 3 || len(p.marks) != 0 {
		t.Errorf("metadata of another committer: %+v, want the offset alone", p)
	}
	full := position{committed: 0}
	for i := range 200 {
		full = full.advance(Selection{Reasons: []string{strings.Repeat("r", 20) + strconv.Itoa(i)}, To: -1}, 100, 0)
	}
	if _, err := full.metadata(); !errors.Is(err, ErrPositionFull) {
		t.Errorf("metadata of 200 selections: %v, want ErrPositionFull", err)
	}
}
