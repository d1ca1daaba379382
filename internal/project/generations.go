package project

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/fence"
)

// Generations are the index generations written beside the live one. The
// live generation is Deps.Index: its vectors are the ones a write's
// documents carry (an event's own, or Deps.Embedder's), which the
// relational store keeps. A generation beside it, one being built with
// another embedder (internal/generation), gets every write too, in the
// index step of the fixed order, each chunk embedded from its text by its
// own embedder, under its own bound and token check, and is fenced as the
// live one is.
//
// The relational store orders the set against the writes: every write
// carries the epoch of the set its index step wrote (Write.Epoch), and the
// relational transaction refuses another epoch than the registry's (a
// *GenerationsChangedError); the projector then reads the set again and
// writes the batch again from the index step. So once a generation's
// start is committed, no relational commit lacks its index write.
type Generations interface {
	// Current returns the epoch of the set of generations held and the
	// generations written beside the live one.
	Current() (epoch int64, beside []Generation)
	// Refresh reads the registry again. An error leaves the set held.
	Refresh(ctx context.Context) error
}

// Generation is an index generation written beside the live one.
type Generation struct {
	Number int
	Index  Index
	// Embedder computes every vector of the generation: the vectors an
	// event carries are the live generation's model's.
	Embedder Embedder
	// Fences checks the generation's index after each batch.
	Fences Fencer
}

// generations returns the set of generations to write: none beside the
// live one without Deps.Generations.
func (p *Projector) generations() (int64, []Generation) {
	if p.d.Generations == nil {
		return 0, nil
	}
	return p.d.Generations.Current()
}

// besideWrite returns w as generation g holds it: the same documents and
// withdrawals, every chunk's vector computed by g's embedder.
func besideWrite(ctx context.Context, g Generation, w *Write) (*Write, error) {
	out, err := Reembed(ctx, g.Embedder, g.Number, w)
	if err != nil {
		return nil, fmt.Errorf("embed for index generation %d: %w", g.Number, err)
	}
	return out, nil
}

// Reembed returns w as index generation n holds it: a copy whose chunks
// of another generation's vectors (Chunk.Generation) get the vector emb,
// n's embedder, computes from their text. It is the write of a generation
// other than the one w's vectors are of: a generation beside the live one,
// its fill, and whatever writes a generation from the relational copy,
// whose rows keep the vectors of the generation that wrote them (after a
// switch, the old model's until their documents are written again).
// Without such chunks it returns w itself.
func Reembed(ctx context.Context, emb Embedder, n int, w *Write) (*Write, error) {
	stale := false
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			stale = stale || c.Generation != n
		}
	}
	if !stale {
		return w, nil
	}
	out := *w
	out.Live = make([]Document, len(w.Live))
	for i, d := range w.Live {
		d.Chunks = append([]Chunk(nil), d.Chunks...)
		for j := range d.Chunks {
			if c := &d.Chunks[j]; c.Generation != n {
				c.Vector, c.Generation = nil, n
			}
		}
		out.Live[i] = d
	}
	if err := FillVectors(ctx, emb, out.Live); err != nil {
		return nil, err
	}
	return &out, nil
}

// indexed is a write of one index generation.
type indexed struct {
	generation int // 0: the live one
	index      Index
	w          *Write
}

// indexWrites returns w's write of the live generation and of each
// generation beside it, embedding the latter's vectors.
func (p *Projector) indexWrites(ctx context.Context, beside []Generation, w *Write) ([]indexed, error) {
	out := []indexed{{index: p.d.Index, w: w}}
	for _, g := range beside {
		var gw *Write
		err := p.retry(ctx, "embedder", func(ctx context.Context) error {
			var err error
			gw, err = besideWrite(ctx, g, w)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, indexed{generation: g.Number, index: g.Index, w: gw})
	}
	return out, nil
}

// applyGenerations writes w in the fixed order to the set of generations
// held, and again to the registry's new set as long as the relational
// store says that the set changed under the write.
func (p *Projector) applyGenerations(ctx context.Context, w *Write, ledger []LedgerEntry) error {
	for {
		epoch, beside := p.generations()
		w.Epoch = epoch
		writes, err := p.indexWrites(ctx, beside, w)
		if err == nil {
			err = p.apply(ctx, writes, ledger)
		}
		changed, ok := errors.AsType[*GenerationsChangedError](err)
		if !ok {
			return err
		}
		p.log.Info("the index generations changed under a write; writing it again to the new set",
			zap.Int64("epoch", changed.Now), zap.Int64("wrote", changed.Wrote))
		if err := p.retry(ctx, StoreRelational, p.d.Generations.Refresh); err != nil {
			return err
		}
	}
}

// besideFailed is the error of a failed write of generation n, beside
// the live one, in a write of the set of epoch: a *GenerationsChangedError
// when the registry no longer has run write n (aborted or retired, its
// collection perhaps deleted already, so the write cannot succeed), which
// writes the batch again to the new set; else err, which the caller
// retries.
func (p *Projector) besideFailed(ctx context.Context, epoch int64, n int, err error) error {
	err = fmt.Errorf("index generation %d: %w", n, err)
	if p.d.Generations.Refresh(ctx) != nil {
		return err
	}
	now, beside := p.d.Generations.Current()
	for _, g := range beside {
		if g.Number == n {
			return err
		}
	}
	return &GenerationsChangedError{Wrote: epoch, Now: now}
}

// primaryFailed is the error of a failed write of the live generation
// (Deps.Index): the *PermanentError of Generations.Refresh when the
// registry no longer has run write it (retired, its collection perhaps
// deleted already, so no retry could succeed: the member must be
// restarted onto the live generation), else err, which the caller
// retries.
func (p *Projector) primaryFailed(ctx context.Context, err error) error {
	if p.d.Generations == nil {
		return err
	}
	if rerr := p.d.Generations.Refresh(ctx); rerr != nil {
		if _, ok := errors.AsType[*PermanentError](rerr); ok {
			return rerr
		}
	}
	return err
}

// checkFences checks the stores against what w wrote: the live
// generation, the graph and the relational store through Deps.Fences,
// then each generation beside the live one.
func (p *Projector) checkFences(ctx context.Context, w *Write) ([]fence.Mismatch, error) {
	want := w.Expected()
	mismatches, err := p.d.Fences.Check(ctx, want)
	if err != nil {
		return nil, err
	}
	_, beside := p.generations()
	for _, g := range beside {
		found, err := g.Fences.Check(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("index generation %d: %w", g.Number, err)
		}
		for _, m := range found {
			m.Store = StoreIndex + " generation " + strconv.Itoa(g.Number)
			mismatches = append(mismatches, m)
		}
	}
	return mismatches, nil
}
