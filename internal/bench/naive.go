package bench

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/postgres"
)

// naive writes one chunk at a time to each store, in the projector's store
// order, the way a loop over chunks would: one single-point Qdrant upsert,
// one Neo4j transaction merging the chunk and its document, one
// single-row PostgreSQL INSERT ... ON CONFLICT. It writes what the
// adapters write for a chunk by default (no chunk text on the graph), and
// nothing they write per batch (document rows, removals, the ledger),
// which only flatters it.
type naive struct {
	stores   *Stores
	driver   neo4j.DriverWithContext
	database string
}

const naiveGraphChunk = `
MERGE (doc:Document {key: $key})
MERGE (ch:Chunk {id: $id})
SET ch.document_key = $key, ch.version = $version, ch.ordinal = $ordinal, ch.metadata = $metadata
MERGE (doc)-[:HAS_CHUNK]->(ch)`

const naiveChunkRow = `
INSERT INTO chunks AS c (chunk_id, document_key, version, ordinal, text, metadata, vector)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, '')::jsonb, $7)
ON CONFLICT (chunk_id) DO UPDATE SET
	document_key = excluded.document_key, version = excluded.version, ordinal = excluded.ordinal,
	text = excluded.text, metadata = excluded.metadata, vector = excluded.vector`

// write writes one chunk of d to the three stores.
func (n *naive) write(ctx context.Context, d *project.Document, c *project.Chunk) error {
	md := make(map[string]any, len(d.Metadata)+len(c.Metadata))
	for k, v := range d.Metadata {
		md[k] = v
	}
	for k, v := range c.Metadata {
		md[k] = v
	}
	payload, err := qdrant.TryValueMap(map[string]any{
		"document_key": d.Key, "version": d.Version, "ordinal": int64(c.Ordinal), "text": c.Text,
		"title": d.Title, "source": d.Source, "metadata": md,
	})
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	_, err = n.stores.Index.Client().Upsert(ctx, &qdrant.UpsertPoints{
		CollectionName: n.stores.Index.Collection(), Wait: qdrant.PtrOf(true),
		Points: []*qdrant.PointStruct{{Id: qdrant.NewIDUUID(c.ID.String()), Vectors: qdrant.NewVectorsDense(c.Vector), Payload: payload}},
	})
	if err != nil {
		return fmt.Errorf("naive index upsert: %w", err)
	}
	chunkMD, err := jsonText(c.Metadata)
	if err != nil {
		return err
	}
	sess := n.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: neo4j.AccessModeWrite, DatabaseName: n.database})
	_, err = sess.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		res, err := tx.Run(ctx, naiveGraphChunk, map[string]any{
			"key": d.Key, "id": c.ID.String(), "version": c.Version, "ordinal": int64(c.Ordinal), "metadata": nilIfEmpty(chunkMD),
		})
		if err != nil {
			return nil, err
		}
		return res.Consume(ctx)
	})
	_ = sess.Close(ctx)
	if err != nil {
		return fmt.Errorf("naive graph merge: %w", err)
	}
	_, err = n.stores.Relational.Pool().Exec(ctx, naiveChunkRow,
		c.ID, c.DocumentKey, c.Version, int32(c.Ordinal), c.Text, chunkMD, postgres.EncodeVector(c.Vector))
	if err != nil {
		return fmt.Errorf("naive relational insert: %w", err)
	}
	return nil
}

// jsonText encodes metadata as the adapters do; "" stands for none.
func jsonText(m map[string]any) (string, error) {
	if m == nil {
		return "", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("chunk metadata: %w", err)
	}
	return string(b), nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
