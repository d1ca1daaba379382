package graph

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/reconcile"
)

var _ reconcile.Store = (*Store)(nil)

// holdings reads, per key, the Document node and every Chunk node that
// names the document, linked by HAS_CHUNK or not: a chunk node without the
// relationship is not held, but it is still in the store.
const holdings = `
UNWIND $keys AS k
OPTIONAL MATCH (d:Document {key: k})
RETURN k, d IS NOT NULL AS present, d.version AS version, COLLECT {
	MATCH (c:Chunk {document_key: k})
	RETURN {id: c.id, version: c.version, linked: d IS NOT NULL AND EXISTS { (d)-[:HAS_CHUNK]->(c) }}
} AS chunks`

// Holdings returns what the graph holds of each document: its Document
// node's version, and its chunks with their versions.
func (s *Store) Holdings(ctx context.Context, keys []string) (map[string]reconcile.Holding, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, holdings, map[string]any{"keys": keys},
		neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("read holdings: %w", err))
	}
	out := make(map[string]reconcile.Holding, len(keys))
	for _, r := range res.Records {
		key, _, _ := neo4j.GetRecordValue[string](r, "k")
		h := reconcile.Holding{Records: true}
		h.Present, _, _ = neo4j.GetRecordValue[bool](r, "present")
		h.Version, _, _ = neo4j.GetRecordValue[int64](r, "version")
		chunks, _, _ := neo4j.GetRecordValue[[]any](r, "chunks")
		for _, raw := range chunks {
			m, _ := raw.(map[string]any)
			text, _ := m["id"].(string)
			version, _ := m["version"].(int64)
			linked, _ := m["linked"].(bool)
			id, err := uuid.Parse(text)
			if err != nil {
				// An id that is not a UUID was not written by the projector.
				id = uuid.Nil
			}
			h.Chunks = append(h.Chunks, reconcile.Held{ID: id, Version: version, Detached: !linked})
		}
		out[key] = h
	}
	return out, nil
}

// scanQueries page through the distinct keys of Document nodes and of
// Chunk nodes, in key order, with a keyset cursor. Their only predicates
// are lower bounds, which Neo4j folds into one range seek of the index
// Migrate makes, starting at the cursor: a STARTS WITH predicate in the
// query would become the seek instead, and each page would read every key
// of the prefix before the cursor again. ScanKeys ends at the first key
// past the prefix, as the keys that start with it are contiguous in key
// order.
var scanQueries = []string{`
MATCH (d:Document) WHERE d.key >= $prefix AND d.key > $after
RETURN d.key AS k ORDER BY k LIMIT $limit`, `
MATCH (c:Chunk) WHERE c.document_key >= $prefix AND c.document_key > $after
RETURN DISTINCT c.document_key AS k ORDER BY k LIMIT $limit`}

// ScanKeys calls fn with pages of the document keys that start with prefix
// among the Document nodes, then among the Chunk nodes, each in key order.
// A key can come twice: once from each scan.
func (s *Store) ScanKeys(ctx context.Context, prefix string, pageSize int, fn func([]string) error) error {
	for _, q := range scanQueries {
		for after := ""; ; {
			res, err := neo4j.ExecuteQuery(ctx, s.driver, q, map[string]any{"after": after, "prefix": prefix, "limit": pageSize},
				neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
			if err != nil {
				return classify(ctx, fmt.Errorf("scan document keys: %w", err))
			}
			page := make([]string, 0, len(res.Records))
			for _, r := range res.Records {
				k, _, _ := neo4j.GetRecordValue[string](r, "k")
				if !strings.HasPrefix(k, prefix) {
					break
				}
				page = append(page, k)
			}
			if len(page) > 0 {
				if err := fn(page); err != nil {
					return err
				}
			}
			if len(page) < pageSize {
				break
			}
			after = page[len(page)-1]
		}
	}
	return nil
}

// DeleteDocuments removes the Document nodes of keys and every Chunk node
// that names them, as a withdrawal does.
func (s *Store) DeleteDocuments(ctx context.Context, keys []string) error {
	return s.Apply(ctx, reconcile.Withdrawals(keys))
}

// HasChunks reports which of ids the graph holds: a Chunk node with that id
// linked from a Document by HAS_CHUNK, as the fences count it.
func (s *Store) HasChunks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = id.String()
	}
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
UNWIND $ids AS id
MATCH (:Document)-[:HAS_CHUNK]->(c:Chunk {id: id})
RETURN DISTINCT c.id AS id`, map[string]any{"ids": texts}, neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("look up chunks: %w", err))
	}
	out := make(map[uuid.UUID]bool, len(ids))
	for _, r := range res.Records {
		text, _, _ := neo4j.GetRecordValue[string](r, "id")
		if id, err := uuid.Parse(text); err == nil {
			out[id] = true
		}
	}
	return out, nil
}
