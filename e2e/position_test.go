package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTopicCreatedAgain deletes the document topic after a drain and creates
// it again under the same name: its offsets start again at 0, below the
// positions the relational store keeps. A tombstone of the new topic must
// be taken as new, not as one read before, because Kafka gives the new
// topic another id.
func TestTopicCreatedAgain(t *testing.T) {
	w := newWorld(t, 1)
	m := newModel()
	var recs []*kgo.Record
	for i := range 5 {
		for v := int64(1); v <= 3; v++ {
			d := doc{Key: w.key(fmt.Sprintf("d%d", i)), Version: v, Chunks: []string{fmt.Sprintf("v%d", v)}}
			m.apply(d)
			recs = append(recs, d.record())
		}
	}
	w.produce(recs...)
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	p.stop()

	ctx := context.Background()
	if _, err := w.adm.DeleteTopics(ctx, w.topic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the topic to be created again", func() bool {
		res, err := w.adm.CreateTopic(ctx, 1, 1, nil, w.topic)
		return err == nil && (res.Err == nil || !isRetriableCreate(res.Err))
	})
	gone := doc{Key: w.key("d0"), Tombstone: true}
	m.apply(gone)
	// A new client: the world's producer knows the old topic's id.
	w.produceTo(0, gone.record())
	p = w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	metrics := p.metrics()
	p.stop()
	w.checkStores(m)
	if got := metrics[`projector_records_total{outcome="withdrawn"}`]; got != 1 {
		t.Errorf("withdrawn records = %v, want 1 (the new topic's tombstone)", got)
	}
}

// isRetriableCreate reports whether creating a topic failed only because
// the deletion of its namesake is still under way.
func isRetriableCreate(err error) bool {
	return errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(err, kerr.UnknownTopicOrPartition)
}
