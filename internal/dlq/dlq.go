// Package dlq writes records the projector cannot project to the
// dead-letter topic, with headers that say why and where from.
//
// A dead letter keeps the original key, value and headers, so fixing the
// cause and re-publishing the value is all a recovery needs. Dead letters
// are compressed; one larger than the dead-letter topic accepts
// uncompressed goes alone in its batch, so the broker takes it whenever it
// compresses below the topic's limit. One that still does not fit is cut
// instead of refused: its headers then say what was cut and where the whole
// record still is, so a dead letter is always deliverable and one record
// never stops a partition.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
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
	// HeaderSourceTopicID is the id of the source topic, as kafka-topics.sh
	// prints it, when the broker gave it: the source offset names the
	// record only in that incarnation of the topic.
	HeaderSourceTopicID = "projector-source-topic-id"
	// HeaderTruncated is set on a dead letter cut to fit the dead-letter
	// topic: a comma-separated list of what was cut (value, headers, key).
	// The whole record stays at the source topic, partition and offset
	// while that topic retains it.
	HeaderTruncated = "projector-truncated"
	// HeaderOriginalValueBytes gives the length of the value before a cut.
	HeaderOriginalValueBytes = "projector-original-value-bytes"
)

// maxDetailBytes bounds the detail header: store errors can be long.
const maxDetailBytes = 1024

// batchOverhead is what a record batch of one record needs beside the
// record's key, value and headers: the batch header (61 bytes), the
// record's own fields and the varint lengths, with room to spare.
const batchOverhead = 512

// headerOverhead bounds the varint lengths of one header's key and value.
const headerOverhead = 10

// DefaultMaxMessageBytes is Kafka's default max.message.bytes, used when
// the topic's own cannot be read.
const DefaultMaxMessageBytes = 1048588

// MaxLargeBytes is the largest dead letter, uncompressed, that the large
// producer sends whole; its batch limit for the topic must be this. It is
// well below the Kafka client's 100 MiB limit of one write to a broker.
const MaxLargeBytes = 64 << 20

// Producer is what the writer needs of a Kafka client.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Config says where dead letters go and how large they may be.
type Config struct {
	Topic string
	// MaxMessageBytes is the dead-letter topic's max.message.bytes; the
	// producer's batch limit for the topic must be the same (see
	// kgo.ProducerBatchMaxBytesFn), so its batches always fit.
	MaxMessageBytes int
}

// Writer sends dead letters to one topic.
type Writer struct {
	// producer batches letters that fit the topic uncompressed.
	producer Producer
	// large sends the larger ones, one at a time under largeMu, so each
	// is alone in its batch and the broker judges it by its own
	// compressed size.
	large     Producer
	largeMu   sync.Mutex
	cfg       Config
	truncated prometheus.Counter
}

var _ project.DeadLetters = (*Writer)(nil)

// New returns a Writer producing to cfg.Topic through producer, whose batch
// limit for the topic is cfg.MaxMessageBytes, and large, whose limit is
// MaxLargeBytes; both must compress and wait for all in-sync replicas
// (franz-go's default, acks=all). They may be one client when the limits
// are equal. Its metric is registered on reg.
func New(producer, large Producer, cfg Config, reg prometheus.Registerer) *Writer {
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	w := &Writer{producer: producer, large: large, cfg: cfg, truncated: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "projector_dlq_truncated_total",
		Help: "Dead letters cut to fit the dead-letter topic's max.message.bytes; the whole record stays at its source offset.",
	})}
	reg.MustRegister(w.truncated)
	return w
}

// Send produces every letter and returns when all are acknowledged. On an
// error some letters may have been written; sending them again on retry
// duplicates them, which is the price of never losing one. An error that
// no retry heals (the broker refuses the records or denies the topic) is a
// *project.PermanentError.
func (w *Writer) Send(ctx context.Context, letters []project.DeadLetter) error {
	var fit []*kgo.Record
	for _, l := range letters {
		rec := Record(w.cfg.Topic, l, MaxLargeBytes)
		if size(rec) > w.cfg.MaxMessageBytes-batchOverhead {
			var err error
			if rec, err = w.sendLarge(ctx, l, rec); err != nil {
				return w.wrap(err)
			}
			if rec == nil {
				continue // taken whole, compressed
			}
		}
		if header(rec, HeaderTruncated) != "" {
			w.truncated.Inc()
		}
		fit = append(fit, rec)
	}
	if len(fit) == 0 {
		return nil
	}
	return w.wrap(w.producer.ProduceSync(ctx, fit...).FirstErr())
}

// sendLarge sends rec, the letter l too large for the topic uncompressed,
// alone. It returns nil once the broker took it, or the letter cut to fit
// the topic uncompressed when the broker refused it as too large even
// compressed.
func (w *Writer) sendLarge(ctx context.Context, l project.DeadLetter, rec *kgo.Record) (*kgo.Record, error) {
	w.largeMu.Lock()
	err := w.large.ProduceSync(ctx, rec).FirstErr()
	w.largeMu.Unlock()
	switch {
	case err == nil:
		if header(rec, HeaderTruncated) != "" {
			w.truncated.Inc()
		}
		return nil, nil
	case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge):
		return Record(w.cfg.Topic, l, w.cfg.MaxMessageBytes), nil
	}
	return nil, err
}

// wrap names the topic in a produce error and marks a permanent one.
func (w *Writer) wrap(err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("produce to dead-letter topic %s: %w", w.cfg.Topic, err)
	if permanent(err) {
		return &project.PermanentError{Err: err}
	}
	return err
}

// permanent reports whether a produce error is one the broker (or the
// client, for a record over the batch limit) will give again whatever the
// number of retries. A missing topic is not: it can be created again.
func permanent(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	ke, ok := errors.AsType[*kerr.Error](err)
	return ok && !ke.Retriable
}

// Record builds the dead-letter record of l for topic, cut to at most
// maxBytes as the producer counts them (see Config.MaxMessageBytes).
func Record(topic string, l project.DeadLetter, maxBytes int) *kgo.Record {
	src := l.Record
	own := []kgo.RecordHeader{
		{Key: HeaderReason, Value: []byte(l.Reason)},
		{Key: HeaderDetail, Value: []byte(truncate(l.Detail, maxDetailBytes))},
		{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
		{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
	}
	if l.TopicID != (project.TopicID{}) {
		own = append(own, kgo.RecordHeader{Key: HeaderSourceTopicID, Value: []byte(l.TopicID.String())})
	}
	rec := &kgo.Record{Topic: topic, Key: src.Key, Value: src.Value, Headers: append(append([]kgo.RecordHeader{}, src.Headers...), own...)}
	budget := maxBytes - batchOverhead
	if size(rec) <= budget {
		return rec
	}
	// Cut in the order that keeps the most use: the value first (the
	// whole value is still at the source offset), then the original
	// headers, then the key.
	var cut []string
	own = append(own, kgo.RecordHeader{Key: HeaderOriginalValueBytes, Value: []byte(strconv.Itoa(len(src.Value)))},
		kgo.RecordHeader{Key: HeaderTruncated, Value: []byte("value,headers,key")})
	rec.Headers = append(append([]kgo.RecordHeader{}, src.Headers...), own...)
	if over := size(rec) - budget; over > 0 && len(rec.Value) > 0 {
		rec.Value = rec.Value[:max(0, len(rec.Value)-over)]
		cut = append(cut, "value")
	}
	if size(rec) > budget && len(src.Headers) > 0 {
		rec.Headers = own
		cut = append(cut, "headers")
	}
	if over := size(rec) - budget; over > 0 {
		rec.Key = rec.Key[:max(0, len(rec.Key)-over)]
		cut = append(cut, "key")
	}
	// The list is never longer than the placeholder it replaces, so the
	// record still fits.
	rec.Headers[len(rec.Headers)-1].Value = []byte(strings.Join(cut, ","))
	return rec
}

// size is the bytes of r's key, value and headers with their lengths.
func size(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + headerOverhead
	}
	return n
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
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
