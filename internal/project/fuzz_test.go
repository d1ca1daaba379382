package project

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzHandle runs whatever arrives on the topic through the whole
// projection path (decode, fold, write, fence, dead letters) with
// in-memory stores. A batch is the fuzzer's two records and the first one
// again, so redeliveries and several events of one document in one batch
// are covered. No input may panic or stop the service, or leave the stores
// disagreeing, and every record gets exactly one outcome.
func FuzzHandle(f *testing.F) {
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":1,"text":"hello world"}`), []byte("d"), []byte(`{"document_key":"d","version":2,"chunks":[{"text":"a"}]}`))
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":2,"op":"withdraw"}`), []byte("d"), []byte(`{"document_key":"d","version":1,"text":"stale"}`))
	f.Add([]byte(`x'}) DETACH DELETE n //`), []byte(`{"document_key":"x'}) DETACH DELETE n //","version":1,"title":"'; DROP TABLE chunks; --","metadata":{"a\"b":"\\"},"text":"x"}`),
		[]byte("e"), []byte(`{"document_key":"e","version":1,"title":"nul \u0000","text":"x"}`))
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":1,"text":"one"}`), []byte("d"), []byte(`{"document_key":"d","version":1,"text":"other content"}`))
	f.Add([]byte("d"), []byte("\xff\xfe"), []byte{}, []byte(`{"document_key":"","version":1}`))
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":9223372036854775807,"chunks":[{"text":"a","vector":[1,2,3,4]}]}`), []byte("d"), []byte(`{"document_key":"d","version":9223372036854775808}`))
	f.Fuzz(func(t *testing.T, key1, value1, key2, value2 []byte) {
		fx := newFixture(t, Config{FenceRetries: 1})
		recs := []*kgo.Record{
			{Topic: "documents", Offset: 0, Key: key1, Value: value1},
			{Topic: "documents", Offset: 1, Key: key2, Value: value2},
			{Topic: "documents", Offset: 2, Key: key1, Value: value1},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fx.p.Handle(ctx, Fence{}, TopicID{}, recs); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if problems := fx.health.Problems(); len(problems) > 0 {
			t.Fatalf("not ready after the batch: %v", problems)
		}
		var outcomes float64
		for _, o := range []Outcome{OutcomeProjected, OutcomeRedelivered, OutcomeStale, OutcomeWithdrawn, OutcomeConflict, OutcomeDLQ} {
			outcomes += testutil.ToFloat64(fx.p.m.records.WithLabelValues(string(o)))
		}
		if outcomes != float64(len(recs)) {
			t.Fatalf("%v outcomes counted, want one per record (%d)", outcomes, len(recs))
		}
		idx, gr, rel := fx.index.snapshot(), fx.graph.snapshot(), fx.rel.snapshot()
		if !reflect.DeepEqual(idx, gr) || !reflect.DeepEqual(idx, rel) {
			t.Fatalf("the stores disagree: index %v, graph %v, relational %v", idx, gr, rel)
		}
	})
}

// snapshot copies the chunk ids held per document.
func (m *memStore) snapshot() map[string][]uuid.UUID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]uuid.UUID, len(m.chunks))
	for k, ids := range m.chunks {
		out[k] = append([]uuid.UUID(nil), ids...)
	}
	return out
}
