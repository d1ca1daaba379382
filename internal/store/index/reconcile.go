package index

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/reconcile"
)

var _ reconcile.Store = (*Store)(nil)

// Holdings returns the points of each document, with the version of their
// payload, from one filtered scroll that reads ids, document_key and
// version only.
func (s *Store) Holdings(ctx context.Context, keys []string) (map[string]reconcile.Holding, error) {
	out := make(map[string]reconcile.Holding, len(keys))
	filter := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}
	err := s.scan(ctx, filter, []string{"document_key", "version"}, func(p *scanned) error {
		key := p.String("document_key")
		h := out[key]
		h.Chunks = append(h.Chunks, reconcile.Held{ID: p.ID(), Version: p.Int("version")})
		out[key] = h
		return nil
	})
	return out, err
}

// pointUUID returns a point's UUID, or uuid.Nil for a numeric or malformed
// id: such a point was not written by the projector.
func pointUUID(id *qdrant.PointId) uuid.UUID {
	u, err := uuid.Parse(id.GetUuid())
	if err != nil {
		return uuid.Nil
	}
	return u
}

// ScanKeys scrolls every point of the collection, reading document_key
// only, and calls fn with the distinct keys of each page that start with
// prefix. Qdrant scrolls in id order, so a key can come in several pages.
// A point without a document_key is reported under the empty key.
func (s *Store) ScanKeys(ctx context.Context, prefix string, pageSize int, fn func([]string) error) error {
	seen := make(map[string]bool, pageSize)
	var page []string
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		err := fn(page)
		page = page[:0]
		clear(seen)
		return err
	}
	err := s.scan(ctx, nil, []string{"document_key"}, func(p *scanned) error {
		key := p.String("document_key")
		if !strings.HasPrefix(key, prefix) || seen[key] {
			return nil
		}
		seen[key] = true
		page = append(page, key)
		if len(page) < pageSize {
			return nil
		}
		return flush()
	})
	if err != nil {
		return err
	}
	return flush()
}

// DeleteDocuments removes every point of keys with one filtered delete, as
// a withdrawal does.
func (s *Store) DeleteDocuments(ctx context.Context, keys []string) error {
	return s.Apply(ctx, reconcile.Withdrawals(keys))
}

// HasChunks reports which of ids are points of the collection.
func (s *Store) HasChunks(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	pids := make([]*qdrant.PointId, len(ids))
	for i, id := range ids {
		pids[i] = qdrant.NewIDUUID(id.String())
	}
	points, err := s.client.Get(ctx, &qdrant.GetPoints{
		CollectionName: s.cfg.Collection, Ids: pids,
		WithPayload: qdrant.NewWithPayload(false), WithVectors: qdrant.NewWithVectors(false),
	})
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("get points: %w", err))
	}
	out := make(map[uuid.UUID]bool, len(points))
	for _, p := range points {
		out[pointUUID(p.GetId())] = true
	}
	return out, nil
}

var _ reconcile.Counter = (*Store)(nil)

// Count returns the number of points of the collection, exactly: with the
// empty prefix only, as Qdrant cannot filter a keyword by its prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int64, bool, error) {
	if prefix != "" {
		return 0, false, nil
	}
	n, err := s.client.Count(ctx, &qdrant.CountPoints{CollectionName: s.cfg.Collection, Exact: qdrant.PtrOf(true)})
	if err != nil {
		return 0, false, classify(ctx, fmt.Errorf("count points: %w", err))
	}
	return int64(n), true, nil
}
