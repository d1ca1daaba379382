package generation

import (
	"context"
	"fmt"
	"sync"

	"github.com/projector/projector/internal/project"
)

// SetReader reads an alias's generations with the epoch of the sets run
// writes: the relational store (postgres.Store.GenerationSet).
type SetReader interface {
	GenerationSet(ctx context.Context, alias string) (int64, Set, error)
}

// Opener makes what writes generation g beside the primary one: its index
// collection, its embedder and its fence. An error means this member
// cannot write g; it must not go on without it.
type Opener func(ctx context.Context, g Generation) (project.Generation, error)

// Tracker holds the set of generations a member writes beside its primary
// one, the live generation when it started, whose collection and embedder
// the member's projector writes as the live one (project.Deps.Index). It
// is the project.Generations of run: Refresh reads the registry again
// after the relational store refused a write of an older epoch.
//
// It is safe for concurrent use: every partition's worker reads it, and
// any of them may refresh it.
type Tracker struct {
	reg     SetReader
	open    Opener
	alias   string
	primary int

	mu     sync.Mutex // guards what follows
	epoch  int64
	beside []project.Generation
	// opened holds every generation opened, by number, so a refresh opens
	// only the new ones.
	opened map[int]project.Generation
}

var _ project.Generations = (*Tracker)(nil)

// NewTracker returns the tracker of a member writing alias's
// generations, whose primary one is primary, having read the registry
// once.
func NewTracker(ctx context.Context, reg SetReader, alias string, primary int, open Opener) (*Tracker, error) {
	t := &Tracker{reg: reg, open: open, alias: alias, primary: primary, opened: map[int]project.Generation{}}
	if err := t.Refresh(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Current returns the epoch held and the generations beside the primary.
func (t *Tracker) Current() (int64, []project.Generation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch, t.beside
}

// Refresh reads the registry and opens the generations written beside
// the primary one that are new. A generation this member cannot open, or
// a primary generation no longer written (retired or aborted: the
// member's projector would write it on), is a *project.PermanentError:
// the member stops writing instead of skipping a generation.
func (t *Tracker) Refresh(ctx context.Context) error {
	epoch, set, err := t.reg.GenerationSet(ctx, t.alias)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.epoch > 0 && epoch == t.epoch {
		return nil // another worker refreshed meanwhile
	}
	var beside []project.Generation
	primaryWritten := false
	for _, g := range set.Written() {
		if g.Number == t.primary {
			primaryWritten = true
			continue
		}
		pg, ok := t.opened[g.Number]
		if !ok {
			if pg, err = t.open(ctx, g); err != nil {
				return &project.PermanentError{Err: fmt.Errorf("this member cannot write %s: %w", g, err)}
			}
			t.opened[g.Number] = pg
		}
		beside = append(beside, pg)
	}
	if !primaryWritten {
		state, live := State("unknown"), "none"
		for _, g := range set {
			if g.Number == t.primary {
				state = g.State
			}
			if g.State == Live {
				live = g.String()
			}
		}
		return &project.PermanentError{Err: fmt.Errorf(
			"index generation %d, which this member writes as its live one, is %s and no longer written: restart the member, so that it writes the live %s", t.primary, state, live)}
	}
	t.epoch, t.beside = epoch, beside
	return nil
}
