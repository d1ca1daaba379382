package postgres

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/projector/projector/internal/metajson"
	"github.com/projector/projector/internal/project"
)

// The column slices below are the parameters of unnest(): one array per
// column, so a whole batch is one statement; the chunks' are sent by COPY.

// columnsOf returns the rows of w's documents and chunks. The chunks'
// ids are also the ids to keep of the write's documents.
func columnsOf(w *project.Write) (*documentColumns, *chunkColumns, error) {
	docs := newDocumentColumns(len(w.Live) + len(w.Withdrawn))
	chunks := newChunkColumns(w)
	for _, d := range w.Live {
		md, err := jsonText(d.Metadata)
		if err != nil {
			return nil, nil, &project.StoreError{Store: project.StoreRelational, Kind: project.Rejected, Err: fmt.Errorf("document %q metadata: %w", d.Key, err)}
		}
		docs.add(d.Key, d.Version, statusLive, d.ContentHash, d.Title, d.Source, md, len(d.Chunks), d.CorrelationID, d.Position)
		for _, c := range d.Chunks {
			cmd, err := jsonText(c.Metadata)
			if err != nil {
				return nil, nil, &project.StoreError{Store: project.StoreRelational, Kind: project.Rejected, Err: fmt.Errorf("chunk %s metadata: %w", c.ID, err)}
			}
			chunks.add(c, cmd)
		}
	}
	for _, d := range w.Withdrawn {
		docs.add(d.Key, d.Version, statusWithdrawn, "", "", "", "", 0, "", d.Position)
	}
	return docs, chunks, nil
}

type documentColumns struct {
	keys, statuses, hashes, titles, sources, metadata, correlations []string
	versions                                                        []int64
	counts                                                          []int32
	// The position of the event that last changed the document; a topic
	// id is '' when unknown.
	topics, topicIDs []string
	partitions       []int32
	offsets          []int64
}

func newDocumentColumns(n int) *documentColumns {
	return &documentColumns{
		keys: make([]string, 0, n), statuses: make([]string, 0, n), hashes: make([]string, 0, n),
		titles: make([]string, 0, n), sources: make([]string, 0, n), metadata: make([]string, 0, n),
		correlations: make([]string, 0, n), versions: make([]int64, 0, n), counts: make([]int32, 0, n),
		topics: make([]string, 0, n), topicIDs: make([]string, 0, n), partitions: make([]int32, 0, n), offsets: make([]int64, 0, n),
	}
}

func (c *documentColumns) add(key string, version int64, status, hash, title, source, metadata string, count int, correlation string, pos project.Position) {
	topicID := ""
	if pos.TopicID != (project.TopicID{}) {
		topicID = uuid.UUID(pos.TopicID).String()
	}
	c.topics = append(c.topics, pos.Topic)
	c.topicIDs = append(c.topicIDs, topicID)
	c.partitions = append(c.partitions, pos.Partition)
	c.offsets = append(c.offsets, pos.Offset)
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
	// ids are encoded as uuid[] straight from their bytes.
	ids                   [][16]byte
	keys, texts, metadata []string
	versions              []int64
	ordinals              []int32
	vectors               [][]byte
	generations           []int32
	// encoded holds every vector of vectors, one after the other: one
	// allocation per write instead of one per chunk.
	encoded []byte
}

// newChunkColumns returns columns with room for the chunks of w.
func newChunkColumns(w *project.Write) *chunkColumns {
	var n, floats int
	for _, d := range w.Live {
		n += len(d.Chunks)
		for _, c := range d.Chunks {
			floats += len(c.Vector)
		}
	}
	return &chunkColumns{
		ids: make([][16]byte, 0, n), keys: make([]string, 0, n), texts: make([]string, 0, n), metadata: make([]string, 0, n),
		versions: make([]int64, 0, n), ordinals: make([]int32, 0, n), vectors: make([][]byte, 0, n),
		generations: make([]int32, 0, n), encoded: make([]byte, 0, 4*floats),
	}
}

func (c *chunkColumns) add(ch project.Chunk, metadata string) {
	c.ids = append(c.ids, ch.ID)
	c.keys = append(c.keys, ch.DocumentKey)
	c.versions = append(c.versions, ch.Version)
	c.ordinals = append(c.ordinals, int32(ch.Ordinal))
	c.texts = append(c.texts, ch.Text)
	c.metadata = append(c.metadata, metadata)
	start := len(c.encoded)
	c.encoded = appendVector(c.encoded, ch.Vector)
	c.vectors = append(c.vectors, c.encoded[start:len(c.encoded):len(c.encoded)])
	c.generations = append(c.generations, int32(ch.Generation))
}

// rows returns the chunk rows as a COPY source.
func (c *chunkColumns) rows() pgx.CopyFromSource {
	return &chunkRows{c: c, row: make([]any, len(chunkStageColumns))}
}

// chunkRows feeds chunkColumns to COPY, one row at a time, reusing one
// row: COPY encodes a row before it asks for the next.
type chunkRows struct {
	c   *chunkColumns
	i   int
	row []any
}

func (r *chunkRows) Next() bool {
	r.i++
	return r.i <= len(r.c.ids)
}

func (r *chunkRows) Values() ([]any, error) {
	i, c := r.i-1, r.c
	r.row[0], r.row[1], r.row[2], r.row[3] = c.ids[i], c.keys[i], c.versions[i], c.ordinals[i]
	r.row[4], r.row[5], r.row[6], r.row[7] = c.texts[i], c.metadata[i], c.vectors[i], c.generations[i]
	return r.row, nil
}

func (r *chunkRows) Err() error { return nil }

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
// Keys are sorted, so equal metadata gives equal text. A float keeps a
// decimal point (3.0, not 3), as jsonb keeps it, so that metadataOf reads
// it back as the float it was rather than as an integer: a repair that
// rebuilds a store from these rows writes the types projected.
func jsonText(m map[string]any) (string, error) {
	if m == nil {
		return "", nil
	}
	return metajson.Marshal(m, metajson.WithPoint)
}
