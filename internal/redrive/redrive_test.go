package redrive

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/dlq"
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
	want := []string{"correlation-id=c-1", "x-producer=crm", "projector-redriven-from=documents.dlq/2/41"}
	if !slices.Equal(keys, want) {
		t.Errorf("headers = %v, want %v", keys, want)
	}
}
