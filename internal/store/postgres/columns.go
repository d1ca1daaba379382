package postgres

import (
	"encoding/json"

	"github.com/projector/projector/internal/project"
)

// The column slices below are the parameters of unnest(): one array per
// column, so a whole batch is one statement.

type documentColumns struct {
	keys, statuses, hashes, titles, sources, metadata, correlations []string
	versions                                                        []int64
	counts                                                          []int32
}

func newDocumentColumns(n int) *documentColumns {
	return &documentColumns{
		keys: make([]string, 0, n), statuses: make([]string, 0, n), hashes: make([]string, 0, n),
		titles: make([]string, 0, n), sources: make([]string, 0, n), metadata: make([]string, 0, n),
		correlations: make([]string, 0, n), versions: make([]int64, 0, n), counts: make([]int32, 0, n),
	}
}

func (c *documentColumns) add(key string, version int64, status, hash, title, source, metadata string, count int, correlation string) {
	c.keys = append(c.keys, key)
	c.versions = append(c.versions, version)
	c.statuses = append(c.statuses, status)
	c.hashes = append(c.hashes, hash)
	c.titles = append(c.titles, title)
	c.sources = append(c.sources, source)
	c.metadata = append(c.metadata, metadata)
	c.counts = append(c.counts, int32(count))
	c.correlations = append(c.correlations, correlation)
}

type chunkColumns struct {
	ids, keys, texts, metadata []string
	versions                   []int64
	ordinals                   []int32
	vectors                    [][]byte
}

func (c *chunkColumns) add(ch project.Chunk, metadata string) {
	c.ids = append(c.ids, ch.ID.String())
	c.keys = append(c.keys, ch.DocumentKey)
	c.versions = append(c.versions, ch.Version)
	c.ordinals = append(c.ordinals, int32(ch.Ordinal))
	c.texts = append(c.texts, ch.Text)
	c.metadata = append(c.metadata, metadata)
	c.vectors = append(c.vectors, EncodeVector(ch.Vector))
}

type ledgerColumns struct {
	keys, docs, ops, hashes, topics, correlations, writers []string
	versions, offsets                                      []int64
	counts, partitions                                     []int32
}

func newLedgerColumns(entries []project.LedgerEntry) *ledgerColumns {
	c := &ledgerColumns{}
	for _, e := range entries {
		c.keys = append(c.keys, e.IdempotencyKey)
		c.docs = append(c.docs, e.DocumentKey)
		c.versions = append(c.versions, e.Version)
		c.ops = append(c.ops, string(e.Op))
		c.hashes = append(c.hashes, e.ContentHash)
		c.counts = append(c.counts, int32(e.ChunkCount))
		c.topics = append(c.topics, e.Topic)
		c.partitions = append(c.partitions, e.Partition)
		c.offsets = append(c.offsets, e.Offset)
		c.correlations = append(c.correlations, e.CorrelationID)
		c.writers = append(c.writers, e.Writer)
	}
	return c
}

// jsonText encodes metadata for a jsonb column; "" stands for SQL NULL.
// encoding/json sorts map keys, so equal metadata gives equal text.
func jsonText(m map[string]any) (string, error) {
	if m == nil {
		return "", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}
