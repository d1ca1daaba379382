package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/postgres"
)

// PeerSink runs the users' alternative for the relational part alone, a
// Kafka Connect JDBC sink, on a topic of chunk rows: the rows are in the
// topic, the table exists, and the sink is to upsert them into it with
// tasks workers. It returns once the sink runs; the benchmark watches the
// table and calls stop when every row is there.
type PeerSink interface {
	Start(ctx context.Context, topic, schema string, tasks int) (stop func() error, err error)
}

// peer measures the peer sink: the corpus's chunk rows, every version's,
// keyed by chunk id, published as schema-wrapped JSON (Connect's
// JsonConverter with schemas) to a fresh topic of partitions partitions
// (a document's rows in its partition, as the projector's events), into a
// schema whose chunks table the relational adapter's own migration made.
// Timed from the first row in the table to the last, so neither the
// sink's JVM start nor the projector's is counted.
func (b *bench) peer(ctx context.Context, label string, partitions int) (Measurement, error) {
	ns, c, st, err := b.setUp(ctx, label)
	if err != nil {
		return Measurement{}, err
	}
	defer b.cleanup(ns, st)
	if err := b.createTopic(ctx, ns.topic, partitions); err != nil {
		return Measurement{}, err
	}
	rows, err := chunkRows(c, b.cfg.Dim, ns.topic, partitions)
	if err != nil {
		return Measurement{}, err
	}
	if err := b.cl.ProduceSync(ctx, rows...).FirstErr(); err != nil {
		return Measurement{}, fmt.Errorf("publish the chunk rows: %w", err)
	}
	stop, err := b.d.Peer.Start(ctx, ns.topic, ns.schema, partitions)
	if err != nil {
		return Measurement{}, fmt.Errorf("start the peer sink: %w", err)
	}
	defer func() { _ = stop() }()
	count := func() (int, error) {
		var n int
		err := st.Relational.Pool().QueryRow(ctx, `SELECT count(*) FROM chunks`).Scan(&n)
		return n, err
	}
	deadline := time.Now().Add(b.cfg.Timeout)
	var first time.Time
	var before int
	for {
		n, err := count()
		if err != nil {
			return Measurement{}, fmt.Errorf("count the sink's rows: %w", err)
		}
		now := time.Now()
		if n > 0 && first.IsZero() {
			first, before = now, n
		}
		if n >= len(rows) {
			if err := stop(); err != nil {
				return Measurement{}, fmt.Errorf("stop the peer sink: %w", err)
			}
			seconds := now.Sub(first).Seconds()
			written := len(rows) - before
			return Measurement{Events: float64(written) / c.ChunksPerEvent(), Chunks: written, Seconds: seconds}, nil
		}
		if now.After(deadline) {
			return Measurement{}, fmt.Errorf("the peer sink wrote %d of %d rows in %s", n, len(rows), b.cfg.Timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// createTopic makes topic with partitions partitions.
func (b *bench) createTopic(ctx context.Context, topic string, partitions int) error {
	resp, err := b.adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// connectRow is a value or key as Connect's JsonConverter reads it with
// schemas enabled.
type connectRow struct {
	Schema  connectSchema  `json:"schema"`
	Payload map[string]any `json:"payload"`
}

type connectSchema struct {
	Type   string         `json:"type"`
	Fields []connectField `json:"fields"`
	Name   string         `json:"name,omitempty"`
}

type connectField struct {
	Field    string `json:"field"`
	Type     string `json:"type"`
	Optional bool   `json:"optional"`
}

var (
	chunkKeySchema   = connectSchema{Type: "struct", Name: "chunk_key", Fields: []connectField{{Field: "chunk_id", Type: "string"}}}
	chunkValueSchema = connectSchema{Type: "struct", Name: "chunk", Fields: []connectField{
		{Field: "chunk_id", Type: "string"}, {Field: "document_key", Type: "string"}, {Field: "version", Type: "int64"},
		{Field: "ordinal", Type: "int32"}, {Field: "text", Type: "string"}, {Field: "metadata", Type: "string", Optional: true},
		{Field: "vector", Type: "bytes"},
	}}
)

// chunkRows returns one record per chunk of every upsert of c, in the
// corpus's order, with the columns of the projector's chunks table: the
// rows the relational adapter writes, decoded and embedded the same way.
func chunkRows(c *Corpus, dim int, topic string, partitions int) ([]*kgo.Record, error) {
	wr := newWriter(dim)
	var out []*kgo.Record
	for _, r := range c.Records {
		if r.Withdraw {
			continue
		}
		w, err := wr.fold([]Record{r})
		if err != nil {
			return nil, err
		}
		for _, d := range w.Live {
			for _, ch := range d.Chunks {
				rec, err := chunkRecord(&d, &ch, topic, int32(Partition(r.Doc, partitions)))
				if err != nil {
					return nil, err
				}
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

func chunkRecord(d *project.Document, ch *project.Chunk, topic string, partition int32) (*kgo.Record, error) {
	id := ch.ID.String()
	key, err := json.Marshal(connectRow{Schema: chunkKeySchema, Payload: map[string]any{"chunk_id": id}})
	if err != nil {
		return nil, err
	}
	var metadata any
	if len(ch.Metadata) > 0 {
		b, err := json.Marshal(ch.Metadata)
		if err != nil {
			return nil, err
		}
		metadata = string(b)
	}
	value, err := json.Marshal(connectRow{Schema: chunkValueSchema, Payload: map[string]any{
		"chunk_id": id, "document_key": d.Key, "version": d.Version, "ordinal": ch.Ordinal,
		"text": ch.Text, "metadata": metadata, "vector": postgres.EncodeVector(ch.Vector),
	}})
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Partition: partition, Key: key, Value: value}, nil
}
