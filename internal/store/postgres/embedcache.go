package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/project"
)

// EmbedCache is the embedding cache: the table embedding_cache maps
// (model, dimension, SHA-256 of a chunk text) to the vector the model gave,
// stored like chunks.vector (little-endian float32). It lives beside the
// projection's tables so it is backed up and restored with them. It is
// safe for concurrent use.
type EmbedCache struct {
	pool *pgxpool.Pool
}

var _ embed.Cache = (*EmbedCache)(nil)

// NewEmbedCache returns the cache in s's schema; s.Migrate creates its
// table.
func NewEmbedCache(s *Store) *EmbedCache { return &EmbedCache{pool: s.pool} }

const lookupEmbeddings = `
SELECT text_sha256, vector FROM embedding_cache
WHERE model = $1 AND dim = $2 AND text_sha256 = ANY($3::bytea[])`

// The first vector of a text stays: a second writer of the same text (two
// partitions embedding it at once) changes nothing, and learns from the
// rows not returned which vectors to read back.
const storeEmbeddings = `
INSERT INTO embedding_cache (model, dim, text_sha256, vector)
SELECT $1, $2, h, v FROM unnest($3::bytea[], $4::bytea[]) AS u(h, v)
ON CONFLICT DO NOTHING
RETURNING text_sha256`

// Lookup returns the stored vectors of keys, in one query.
func (c *EmbedCache) Lookup(ctx context.Context, model string, dim int, keys []embed.Key) (map[embed.Key][]float32, error) {
	if len(keys) == 0 {
		return map[embed.Key][]float32{}, nil
	}
	hashes := make([][]byte, len(keys))
	for i := range keys {
		hashes[i] = keys[i][:]
	}
	rows, err := c.pool.Query(ctx, lookupEmbeddings, model, dim, hashes)
	if err != nil {
		return nil, cacheError(fmt.Errorf("read embedding cache: %w", err))
	}
	out := make(map[embed.Key][]float32, len(keys))
	var hash, vec []byte
	var corrupt error
	_, err = pgx.ForEachRow(rows, []any{&hash, &vec}, func() error {
		v, err := DecodeVector(vec)
		if err == nil && (len(v) != dim || len(hash) != len(embed.Key{})) {
			err = fmt.Errorf("entry with a %d-byte hash and a vector of dimension %d, want %d and %d", len(hash), len(v), len(embed.Key{}), dim)
		}
		if err != nil {
			corrupt = err
			return err
		}
		out[embed.Key(hash)] = v
		return nil
	})
	if corrupt != nil {
		// Retrying cannot mend a row: an operator must delete it.
		return nil, &project.StoreError{Store: project.StoreRelational, Kind: project.Fatal,
			Err: fmt.Errorf("read embedding cache of model %q: %w (delete the model's rows from embedding_cache)", model, corrupt)}
	}
	if err != nil {
		return nil, cacheError(fmt.Errorf("read embedding cache: %w", err))
	}
	return out, nil
}

// Store adds vecs[i] under keys[i] in one statement, and returns the
// vectors the cache holds for keys: vecs[i] where it was inserted, else
// the stored vector, read back in a second query (a later statement, so it
// sees the row of the writer that came first).
func (c *EmbedCache) Store(ctx context.Context, model string, dim int, keys []embed.Key, vecs [][]float32) (map[embed.Key][]float32, error) {
	if len(keys) != len(vecs) {
		return nil, fmt.Errorf("store embeddings: %d keys for %d vectors", len(keys), len(vecs))
	}
	out := make(map[embed.Key][]float32, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	hashes := make([][]byte, len(keys))
	encoded := make([][]byte, len(vecs))
	for i := range keys {
		hashes[i] = keys[i][:]
		encoded[i] = EncodeVector(vecs[i])
	}
	rows, err := c.pool.Query(ctx, storeEmbeddings, model, dim, hashes, encoded)
	if err != nil {
		return nil, cacheError(fmt.Errorf("write embedding cache: %w", err))
	}
	inserted := make(map[embed.Key]bool, len(keys))
	var hash []byte
	_, err = pgx.ForEachRow(rows, []any{&hash}, func() error {
		if len(hash) == len(embed.Key{}) {
			inserted[embed.Key(hash)] = true
		}
		return nil
	})
	if err != nil {
		return nil, cacheError(fmt.Errorf("write embedding cache: %w", err))
	}
	var taken []embed.Key
	for i, k := range keys {
		if inserted[k] {
			out[k] = vecs[i]
		} else {
			taken = append(taken, k)
		}
	}
	if len(taken) == 0 {
		return out, nil
	}
	first, err := c.Lookup(ctx, model, dim, taken)
	if err != nil {
		return nil, err
	}
	for _, k := range taken {
		v, ok := first[k]
		if !ok {
			// Only an operator deleting rows right now gets here.
			return nil, &project.StoreError{Store: project.StoreRelational, Kind: project.Transient,
				Err: errors.New("write embedding cache: a row that blocked the insert is gone")}
		}
		out[k] = v
	}
	return out, nil
}

// cacheError classifies a cache failure like any relational one, except
// that nothing about one record can make the cache refuse it: what the
// relational classification calls Rejected is Fatal here, so a cache
// problem never dead-letters a record.
func cacheError(err error) error {
	err = classify(err)
	if se, ok := err.(*project.StoreError); ok && se.Kind == project.Rejected {
		se.Kind = project.Fatal
	}
	return err
}
