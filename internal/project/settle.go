package project

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
)

// The actions of projector_index_settled_points_total and the results of
// projector_index_settles_total.
const (
	settleRemoved  = "removed"
	settleRestored = "restored"

	settleClean   = "clean"
	settleChanged = "changed"
	settleFailed  = "failed"
)

// settlePage is how many recorded documents a settle compares at once.
const settlePage = 500

// Settle closes the index's window after fence's partition changed hands:
// it makes the index hold exactly what the relational store holds of every
// document recorded for the partition's settle (Write.Settle), by this
// owner and by earlier ones that did not settle, and forgets them.
//
// The index checks no token, so a member that lost the partition without
// knowing it can write there after this owner did, until its own index
// writes run out of time (Config.IndexWriteTimeout): its points of an
// earlier event stay where this owner's newer ones are, and its removals
// may take this owner's points away. The owner calls Settle once that time
// is over (Fence.LateUntil), between its batches, so nothing but the
// settle writes the documents meanwhile: it reads the relational store,
// the decision store, compares each document's points with it, by chunk id
// and by the event each point is of, and writes the index exactly where
// they differ, under the same bound as every index write. A settle that
// finds its token no longer the newest returns the *FencedError and writes
// nothing more.
func (p *Projector) Settle(ctx context.Context, f Fence) error {
	start := time.Now()
	p.fault(ctx, "settle")
	var documents, removed, restored int
	for after := ""; ; {
		var keys []string
		err := p.retry(ctx, StoreRelational, func(ctx context.Context) error {
			var err error
			keys, err = p.d.Settlement.Unsettled(ctx, f, after, settlePage)
			return err
		})
		if err == nil && len(keys) > 0 {
			var r, s int
			r, s, err = p.settlePage(ctx, f, keys)
			documents, removed, restored = documents+len(keys), removed+r, restored+s
		}
		if err != nil {
			p.m.settles.WithLabelValues(settleFailed).Inc()
			if _, ok := errors.AsType[*FencedError](err); ok {
				p.m.fenced.WithLabelValues(StoreIndex).Inc()
			}
			return err
		}
		if len(keys) < settlePage {
			break
		}
		after = keys[len(keys)-1]
	}
	fields := []zap.Field{zap.String("topic", f.Topic), zap.Int32("partition", f.Partition), zap.Int64("token", f.Token),
		zap.Int("documents", documents), zap.Int("removed", removed), zap.Int("restored", restored), zap.Duration("took", time.Since(start))}
	if removed+restored == 0 {
		p.m.settles.WithLabelValues(settleClean).Inc()
		p.log.Info("settled the index after taking the partition: nothing to change", fields...)
		return nil
	}
	p.m.settles.WithLabelValues(settleChanged).Inc()
	p.log.Warn("settled the index after taking the partition: it held writes of a member that had lost the partition, or of one that died before its relational write", fields...)
	return nil
}

// settlePage settles the recorded documents keys in every index
// generation written, and forgets them. It returns the points it removed
// and restored.
func (p *Projector) settlePage(ctx context.Context, f Fence, keys []string) (removed, restored int, err error) {
	var (
		current    *Write
		incomplete map[string][]int
	)
	err = p.retry(ctx, StoreRelational, func(ctx context.Context) error {
		var err error
		current, incomplete, err = p.d.Settlement.Reprojection(ctx, keys)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	for key, lacking := range incomplete {
		p.log.Warn("cannot settle a document whose chunk rows the relational store lacks; projector reconcile reports it",
			zap.String("document_key", key), zap.Ints("ordinals", lacking))
	}
	_, beside := p.generations()
	targets := []Generation{{Number: p.cfg.Generation, Index: p.d.Index, Embedder: p.d.Embedder}}
	targets = append(targets, beside...)
	for _, g := range targets {
		r, s, err := p.settleGeneration(ctx, f, g, keys, current)
		if err != nil {
			return 0, 0, err
		}
		removed, restored = removed+r, restored+s
	}
	err = p.retry(ctx, StoreRelational, func(ctx context.Context) error { return p.d.Settlement.Settled(ctx, f, keys) })
	return removed, restored, err
}

// settleGeneration makes generation g's index hold exactly current of
// keys, with g's vectors: current's where its rows hold them, else its
// embedder's (Reembed).
func (p *Projector) settleGeneration(ctx context.Context, f Fence, g Generation, keys []string, current *Write) (removed, restored int, err error) {
	var points map[string][]Point
	err = p.retry(ctx, StoreIndex, func(ctx context.Context) error {
		var err error
		points, err = g.Index.Points(ctx, keys)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	fix := &Write{Fence: f, Exact: true}
	for _, d := range current.Live {
		if r, s := compare(d, points[d.Key]); r+s > 0 {
			fix.Live = append(fix.Live, d)
			removed, restored = removed+r, restored+s
		}
	}
	for _, d := range current.Withdrawn {
		if n := len(points[d.Key]); n > 0 {
			fix.Withdrawn = append(fix.Withdrawn, d)
			removed += n
		}
	}
	if len(fix.Live) > 0 {
		err = p.retry(ctx, "embedder", func(ctx context.Context) error {
			var err error
			fix, err = besideWrite(ctx, g, fix)
			return err
		})
		if err != nil {
			return 0, 0, err
		}
	}
	p.fault(ctx, "settle-write")
	if fix.Empty() {
		return removed, restored, nil
	}
	err = p.retry(ctx, StoreIndex, func(ctx context.Context) error {
		err := p.writeIndex(ctx, f, func(ctx context.Context) error { return g.Index.Apply(ctx, fix) })
		if err != nil && g.Index == p.d.Index {
			// The live generation retired under the member: a retry
			// cannot succeed once its collection is gone.
			return p.primaryFailed(ctx, err)
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	p.m.settled.WithLabelValues(settleRemoved).Add(float64(removed))
	p.m.settled.WithLabelValues(settleRestored).Add(float64(restored))
	return removed, restored, nil
}

// compare counts the points of pts the live document d does not hold
// (removed) and the chunks of d the index lacks or holds of another event
// (restored).
func compare(d Document, pts []Point) (removed, restored int) {
	want := make(map[uuid.UUID]bool, len(d.Chunks))
	for _, c := range d.Chunks {
		want[c.ID] = true
	}
	held := make(map[uuid.UUID]bool, len(pts))
	for _, pt := range pts {
		switch {
		case !want[pt.ID] || held[pt.ID]:
			removed++
		case pt.Version != d.Version || !pt.Position.same(d.Position):
			restored++
		}
		held[pt.ID] = true
	}
	for id := range want {
		if !held[id] {
			restored++
		}
	}
	return removed, restored
}
