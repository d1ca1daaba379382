package project

import (
	"context"
	"fmt"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
)

// NewDocument is the live document that the upsert ev projects at pos:
// its chunks with their derived ids, and the vectors ev carried (nil where
// FillVectors must compute one). The projector, the repair from the log
// and the benchmark all build documents with it, so the three write the
// same rows.
func NewDocument(ev *event.Event, pos Position) Document {
	d := Document{
		Key: ev.Key, Version: ev.Version, Position: pos, Title: ev.Title, Source: ev.Source,
		Metadata: ev.Metadata, ContentHash: ev.ContentHash, CorrelationID: ev.CorrelationID,
		Chunks: make([]Chunk, len(ev.Chunks)),
	}
	for i, c := range ev.Chunks {
		d.Chunks[i] = Chunk{
			ID: keys.ChunkID(ev.Key, ev.Version, i), DocumentKey: ev.Key, Version: ev.Version,
			Ordinal: i, Text: c.Text, Vector: c.Vector, Metadata: c.Metadata,
		}
	}
	return d
}

// FillVectors computes, with one call of emb, the vectors the chunks of
// docs lack. On an error no chunk is changed, so it may be called again.
func FillVectors(ctx context.Context, emb Embedder, docs []Document) error {
	var texts []string
	var missing []*Chunk
	for i := range docs {
		for j := range docs[i].Chunks {
			if c := &docs[i].Chunks[j]; c.Vector == nil {
				texts = append(texts, c.Text)
				missing = append(missing, c)
			}
		}
	}
	if len(texts) == 0 {
		return nil
	}
	vecs, err := emb.Embed(ctx, texts)
	if err != nil {
		return err
	}
	if len(vecs) != len(texts) {
		return fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(texts))
	}
	for i, c := range missing {
		c.Vector = vecs[i]
	}
	return nil
}
