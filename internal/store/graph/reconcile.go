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
// relationship is not held, but it is still in the store. It answers with
// one record of lists, [key, present, version, [[id, version, linked]...]]
// per key that the graph holds anything of: a record a key costs more in
// Bolt and in the driver than the reads themselves.
const holdings = `
UNWIND $keys AS k
OPTIONAL MATCH (d:Document {key: k})
WITH k, d, COLLECT {
	MATCH (c:Chunk {document_key: k})
	RETURN [c.id, c.version, d IS NOT NULL AND EXISTS { (d)-[:HAS_CHUNK]->(c) }]
} AS chunks
WHERE d IS NOT NULL OR size(chunks) > 0
RETURN collect([k, d IS NOT NULL, d.version, chunks]) AS docs`

// Holdings returns what the graph holds of each document: its Document
// node's version, and its chunks with their versions. Every key is in the
// answer, as the graph keeps a record of each document (or lacks it).
func (s *Store) Holdings(ctx context.Context, keys []string) (map[string]reconcile.Holding, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, holdings, map[string]any{"keys": keys},
		neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("read holdings: %w", err))
	}
	out := make(map[string]reconcile.Holding, len(keys))
	for _, k := range keys {
		out[k] = reconcile.Holding{Records: true}
	}
	for _, r := range res.Records {
		docs, _, _ := neo4j.GetRecordValue[[]any](r, "docs")
		for _, raw := range docs {
			doc, _ := raw.([]any)
			if len(doc) != 4 {
				continue
			}
			key, _ := doc[0].(string)
			h := reconcile.Holding{Records: true}
			h.Present, _ = doc[1].(bool)
			h.Version, _ = doc[2].(int64)
			chunks, _ := doc[3].([]any)
			h.Chunks = make([]reconcile.Held, 0, len(chunks))
			for _, raw := range chunks {
				c, _ := raw.([]any)
				if len(c) != 3 {
					continue
				}
				text, _ := c[0].(string)
				version, _ := c[1].(int64)
				linked, _ := c[2].(bool)
				id, err := uuid.Parse(text)
				if err != nil {
					// An id that is not a UUID was not written by the projector.
					id = uuid.Nil
				}
				h.Chunks = append(h.Chunks, reconcile.Held{ID: id, Version: version, Detached: !linked})
			}
			out[key] = h
		}
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
// order. A page is one record of a list: a record a key costs more than
// reading the key.
var scanQueries = []string{`
MATCH (d:Document) WHERE d.key >= $prefix AND d.key > $after
WITH d.key AS k ORDER BY k LIMIT $limit
RETURN collect(k) AS keys`, `
MATCH (c:Chunk) WHERE c.document_key >= $prefix AND c.document_key > $after
WITH DISTINCT c.document_key AS k ORDER BY k LIMIT $limit
RETURN collect(k) AS keys`}

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
			var found []any
			if len(res.Records) > 0 {
				found, _, _ = neo4j.GetRecordValue[[]any](res.Records[0], "keys")
			}
			page := make([]string, 0, len(found))
			for _, raw := range found {
				k, _ := raw.(string)
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

var _ reconcile.Counter = (*Store)(nil)

// count adds up the Document nodes and the Chunk nodes whose key starts
// with the prefix, as Holdings reads them: Chunk nodes by the document_key
// they name, linked or not.
const count = `
CALL () { MATCH (d:Document) WHERE d.key STARTS WITH $prefix RETURN count(d) AS documents }
CALL () { MATCH (c:Chunk) WHERE c.document_key STARTS WITH $prefix RETURN count(c) AS chunks }
RETURN documents + chunks AS n`

// Count returns the number of Document and Chunk nodes of documents whose
// key starts with prefix, read from the indexes Migrate makes.
func (s *Store) Count(ctx context.Context, prefix string) (int64, bool, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, count, map[string]any{"prefix": prefix},
		neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return 0, false, classify(ctx, fmt.Errorf("count nodes: %w", err))
	}
	if len(res.Records) != 1 {
		return 0, false, fmt.Errorf("count nodes: %d records, want 1", len(res.Records))
	}
	n, _, err := neo4j.GetRecordValue[int64](res.Records[0], "n")
	if err != nil {
		return 0, false, fmt.Errorf("count nodes: %w", err)
	}
	return n, true, nil
}
