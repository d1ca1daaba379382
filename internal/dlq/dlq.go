// Package dlq writes records the projector cannot project to the
// dead-letter topic, unchanged, with headers that say why and where from.
//
// A dead letter keeps the original key, value and headers, so fixing the
// cause and re-publishing the value is all a recovery needs.
package dlq

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/project"
)

// The headers a dead letter carries beside the original ones.
const (
	HeaderReason          = "projector-error-reason"
	HeaderDetail          = "projector-error-detail"
	HeaderSourceTopic     = "projector-source-topic"
	HeaderSourcePartition = "projector-source-partition"
	HeaderSourceOffset    = "projector-source-offset"
)

// maxDetailBytes bounds the detail header: store errors can be long.
const maxDetailBytes = 1024

// Producer is what the writer needs of a Kafka client.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Writer sends dead letters to one topic.
type Writer struct {
	producer Producer
	topic    string
}

var _ project.DeadLetters = (*Writer)(nil)

// New returns a Writer producing to topic through producer, which must wait
// for all in-sync replicas (franz-go's default, acks=all).
func New(producer Producer, topic string) *Writer {
	return &Writer{producer: producer, topic: topic}
}

// Send produces every letter and returns when all are acknowledged. On an
// error some letters may have been written; sending them again on retry
// duplicates them, which is the price of never losing one.
func (w *Writer) Send(ctx context.Context, letters []project.DeadLetter) error {
	recs := make([]*kgo.Record, len(letters))
	for i, l := range letters {
		recs[i] = Record(w.topic, l)
	}
	if err := w.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", w.topic, err)
	}
	return nil
}

// Record builds the dead-letter record of l for topic.
func Record(topic string, l project.DeadLetter) *kgo.Record {
	src := l.Record
	headers := make([]kgo.RecordHeader, 0, len(src.Headers)+5)
	headers = append(headers, src.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(l.Reason)},
		kgo.RecordHeader{Key: HeaderDetail, Value: []byte(truncate(l.Detail, maxDetailBytes))},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
	)
	return &kgo.Record{Topic: topic, Key: src.Key, Value: src.Value, Headers: headers}
}

// truncate cuts s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
