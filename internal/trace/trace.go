// Package trace writes an optional record per event and stage to a trace
// topic, keyed by the event's idempotency key, so an operator can follow any
// event with one lookup: every stage of an event lands in the same partition
// of the trace topic, in order.
//
// Tracing is observability, not part of the projection: records are
// produced asynchronously, and when the client's buffer is full they are
// dropped and counted rather than slowing the projection down.
package trace

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
)

// Producer is what the writer needs of a Kafka client.
type Producer interface {
	TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Writer produces trace records to one topic.
type Writer struct {
	producer Producer
	topic    string
	instance string
	log      *zap.Logger
	dropped  prometheus.Counter
	failed   prometheus.Counter
}

var _ project.Tracer = (*Writer)(nil)

// New returns a Writer; its metrics are registered on reg.
func New(producer Producer, topic, instance string, log *zap.Logger, reg prometheus.Registerer) *Writer {
	w := &Writer{
		producer: producer, topic: topic, instance: instance, log: log,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_trace_dropped_total",
			Help: "Trace records dropped because the producer's buffer was full.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_trace_errors_total",
			Help: "Trace records the broker did not accept.",
		}),
	}
	reg.MustRegister(w.dropped, w.failed)
	return w
}

// record is the JSON value of a trace record.
type record struct {
	Stage          project.Stage `json:"stage"`
	IdempotencyKey string        `json:"idempotency_key,omitempty"`
	DocumentKey    string        `json:"document_key,omitempty"`
	Version        int64         `json:"version,omitempty"`
	Outcome        string        `json:"outcome,omitempty"`
	Reason         string        `json:"reason,omitempty"`
	Topic          string        `json:"topic"`
	Partition      int32         `json:"partition"`
	Offset         int64         `json:"offset"`
	CorrelationID  string        `json:"correlation_id,omitempty"`
	Instance       string        `json:"instance"`
	Time           time.Time     `json:"time"`
}

// Trace produces one trace record per event, without waiting.
func (w *Writer) Trace(ctx context.Context, stage project.Stage, events []project.TraceEvent) {
	now := time.Now().UTC()
	for _, e := range events {
		key := e.IdempotencyKey
		if key == "" {
			// Bad input has no business key: its place in the topic is its
			// identity.
			key = "record:" + e.Topic + ":" + strconv.Itoa(int(e.Partition)) + ":" + strconv.FormatInt(e.Offset, 10)
		}
		value, err := json.Marshal(record{
			Stage: stage, IdempotencyKey: e.IdempotencyKey, DocumentKey: e.DocumentKey, Version: e.Version,
			Outcome: e.Outcome, Reason: e.Reason, Topic: e.Topic, Partition: e.Partition, Offset: e.Offset,
			CorrelationID: e.CorrelationID, Instance: w.instance, Time: now,
		})
		if err != nil {
			w.failed.Inc()
			continue
		}
		w.producer.TryProduce(ctx, &kgo.Record{Topic: w.topic, Key: []byte(key), Value: value}, w.done)
	}
}

func (w *Writer) done(_ *kgo.Record, err error) {
	switch {
	case err == nil:
	case errors.Is(err, kgo.ErrMaxBuffered):
		w.dropped.Inc()
	default:
		w.failed.Inc()
	}
}
