package bench

import (
	"context"
	"fmt"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
)

// byPartition splits the records into n partitions, each in corpus order.
func byPartition(recs []Record, n int) [][]Record {
	out := make([][]Record, n)
	for _, r := range recs {
		p := Partition(r.Doc, n)
		out[p] = append(out[p], r)
	}
	return out
}

// writer turns corpus records into the stores' writes as the service
// would: decoded by the service's decoder, chunk ids from keys.ChunkID,
// vectors from the hashing embedder.
type writer struct {
	dec *event.Decoder
	emb *embed.Hashing
}

func newWriter(dim int) *writer {
	limits := event.DefaultLimits()
	limits.VectorDim = dim
	return &writer{dec: event.NewDecoder(limits, event.Splitter{MaxBytes: event.DefaultChunkBytes}), emb: embed.NewHashing(dim)}
}

// batches returns the writes of one partition's records: batches of at
// most batchRecords records, cut further so no write has more than
// maxChunks chunks (as project.Handle does), each folded to its net
// effect. The corpus has no stale or conflicting events, so the net effect
// of a batch is the last event of each document.
func (wr *writer) batches(recs []Record, batchRecords, maxChunks int) ([]*project.Write, error) {
	var out []*project.Write
	for len(recs) > 0 {
		n := min(len(recs), batchRecords)
		batch := recs[:n]
		recs = recs[n:]
		begin, chunks := 0, 0
		for i, r := range batch {
			if i > begin && chunks+r.Chunks > maxChunks {
				w, err := wr.fold(batch[begin:i])
				if err != nil {
					return nil, err
				}
				out = append(out, w)
				begin, chunks = i, 0
			}
			chunks += r.Chunks
		}
		w, err := wr.fold(batch[begin:])
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

func (wr *writer) fold(recs []Record) (*project.Write, error) {
	var order []string
	last := map[string]event.Event{}
	for _, r := range recs {
		ev, err := wr.dec.Decode([]byte(r.Key), r.Value, "")
		if err != nil {
			return nil, fmt.Errorf("decode corpus record of %s: %w", r.Key, err)
		}
		if _, ok := last[r.Key]; !ok {
			order = append(order, r.Key)
		}
		last[r.Key] = ev
	}
	w := &project.Write{}
	for _, key := range order {
		ev := last[key]
		if ev.Op == keys.OpWithdraw {
			w.Withdrawn = append(w.Withdrawn, project.Withdrawal{Key: key, Version: ev.Version})
			continue
		}
		d, err := wr.document(ev)
		if err != nil {
			return nil, err
		}
		w.Live = append(w.Live, d)
	}
	return w, nil
}

// document builds a live document from an upsert, with vectors.
func (wr *writer) document(ev event.Event) (project.Document, error) {
	d := project.NewDocument(&ev, project.Position{})
	err := project.FillVectors(context.Background(), wr.emb, []project.Document{d})
	return d, err
}

// finalState returns what the stores hold after the whole corpus: live
// documents and their chunks.
func finalState(recs []Record) (liveDocs, liveChunks int) {
	last := map[string]Record{}
	for _, r := range recs {
		last[r.Key] = r
	}
	for _, r := range last {
		if !r.Withdraw {
			liveDocs++
			liveChunks += r.Chunks
		}
	}
	return liveDocs, liveChunks
}
