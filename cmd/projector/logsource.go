package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/store/postgres"
)

// logSource gives reconcile --repair back, from the document topic, the
// documents whose chunk rows the relational copy lost: it reads the event
// at the position the documents table records for the current version,
// decodes and embeds it as run does, and checks it is the event that
// projected that version.
type logSource struct {
	kafka []kgo.Opt
	rel   *postgres.Store
	dec   *event.Decoder
	// emb is the embedder of generation, the live one, which the repair
	// writes: an event's own vectors count as its model's, as in run.
	emb        project.Embedder
	generation int
}

var _ reconcile.Log = (*logSource)(nil)

func (l *logSource) Documents(ctx context.Context, docKeys []string) ([]project.Document, map[string]error, error) {
	placed, err := l.rel.Positions(ctx, docKeys)
	if err != nil {
		return nil, nil, err
	}
	lost := map[string]error{}
	var docs []project.Document
	for _, key := range docKeys {
		p, ok := placed[key]
		switch {
		case !ok:
			lost[key] = errors.New("the document is no longer live")
			continue
		case p.Position.Topic == "":
			lost[key] = errors.New("its row records no log position (written before positions were kept)")
			continue
		}
		d, err := l.document(ctx, key, p)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			lost[key] = err
			continue
		}
		docs = append(docs, d)
	}
	return docs, lost, nil
}

// document reads and rebuilds one document from its event at p.
func (l *logSource) document(ctx context.Context, key string, p postgres.Placed) (project.Document, error) {
	pos := p.Position
	rec, id, err := readAt(ctx, l.kafka, pos.Topic, pos.Partition, pos.Offset)
	if err != nil {
		return project.Document{}, fmt.Errorf("read %s/%d/%d: %w", pos.Topic, pos.Partition, pos.Offset, err)
	}
	if pos.TopicID != (project.TopicID{}) && id != pos.TopicID {
		return project.Document{}, fmt.Errorf("topic %s was created again since version %d was projected (id %s then, %s now)", pos.Topic, p.Version, pos.TopicID, id)
	}
	var correlation string
	for _, h := range rec.Headers {
		if h.Key == "correlation-id" {
			correlation = string(h.Value)
		}
	}
	ev, err := l.dec.Decode(rec.Key, rec.Value, correlation)
	if err != nil {
		return project.Document{}, fmt.Errorf("the event at %s/%d/%d does not decode: %w", pos.Topic, pos.Partition, pos.Offset, err)
	}
	if ev.Key != key || ev.Version != p.Version || ev.Op != keys.OpUpsert || ev.ContentHash != p.ContentHash || len(ev.Chunks) != p.ChunkCount {
		return project.Document{}, fmt.Errorf("the event at %s/%d/%d is not the one that projected version %d (another topic of that name, or other --chunk-bytes)",
			pos.Topic, pos.Partition, pos.Offset, p.Version)
	}
	d := project.NewDocument(&ev, pos)
	for i := range d.Chunks {
		d.Chunks[i].Generation = l.generation
	}
	if err := project.FillVectors(ctx, l.emb, []project.Document{d}); err != nil {
		return project.Document{}, fmt.Errorf("embed: %w", err)
	}
	return d, nil
}
