package explore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/projector/projector/internal/project"
)

// journal is what happened in one case, in order: the store calls of each
// writer and the owner's taking of the partition. The verdicts of the
// case, what became of the late writer's write in each store, are read
// from it.
type journal struct {
	mu     sync.Mutex
	events []entry
}

// entry is one store call of a writer (store set), or a step of the owner
// (store empty).
type entry struct {
	who, store, call string
	err              error
}

func (j *journal) add(e entry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, e)
}

// The owner's steps in a journal: its token taken in the relational store,
// then raised in the graph.
const (
	stepToken  = "token"
	stepRaised = "raised"
)

// recordedIndex, recordedGraph and recordedRelational record a writer's
// calls that decide what its write became: the index's writes and token
// checks, the graph's and the relational store's writes.
type recordedIndex struct {
	project.Index
	j   *journal
	who string
}

func (r recordedIndex) Apply(ctx context.Context, w *project.Write) error {
	err := r.Index.Apply(ctx, w)
	r.j.add(entry{who: r.who, store: project.StoreIndex, call: "write", err: err})
	return err
}

type recordedGraph struct {
	project.Graph
	j   *journal
	who string
}

func (r recordedGraph) Apply(ctx context.Context, w *project.Write) error {
	err := r.Graph.Apply(ctx, w)
	r.j.add(entry{who: r.who, store: project.StoreGraph, call: "write", err: err})
	return err
}

type recordedRelational struct {
	project.Relational
	j   *journal
	who string
}

func (r recordedRelational) Apply(ctx context.Context, w *project.Write, ledger []project.LedgerEntry) error {
	err := r.Relational.Apply(ctx, w, ledger)
	r.j.add(entry{who: r.who, store: project.StoreRelational, call: "write", err: err})
	return err
}

func (r recordedRelational) CheckFence(ctx context.Context, f project.Fence) error {
	err := r.Relational.CheckFence(ctx, f)
	r.j.add(entry{who: r.who, store: project.StoreIndex, call: "check", err: err})
	return err
}

// The verdicts: what became of the late writer's write in a store.
const (
	// notReached: the late writer stopped before writing the store.
	notReached = "not reached"
	// beforeToken: written before the owner took its token; the owner's
	// writes, after it, replace it.
	beforeToken = "written before the owner's token"
	// refused: the store refused it in its transaction (the token).
	refused = "refused in its transaction"
	// refusedAtCheck: the token check before the index write refused it.
	refusedAtCheck = "refused at its token check"
	// ranOut: the index write ran out of its bound and was then refused
	// at the check before the next try.
	ranOut = "ran out of its bound, then refused at its token check"
	// landedSettled: it landed in the index after the owner's token and
	// the owner's settle changed what it left.
	landedSettled = "landed after the owner's token; removed by the owner's settle"
	// landedReprojected: it landed in the index after the owner's token
	// and the owner's fence found it and re-projected exactly.
	landedReprojected = "landed after the owner's token; replaced by the owner's re-projection"
	// landedOverwritten: it landed in the index after the owner's token
	// and left nothing the owner's own later writes did not replace.
	landedOverwritten = "landed after the owner's token; replaced by the owner's later writes"
	// takenAfterToken: a transactional store took it after the owner's
	// token: a hole, which fails the case.
	takenAfterToken = "TAKEN AFTER THE OWNER'S TOKEN"
)

// verdict is what became of the late writer's write in each store.
type verdict struct {
	index, graph, relational string
}

func (v verdict) String() string {
	return strings.Join([]string{v.index, v.graph, v.relational}, "\t")
}

// verdicts reads the late writer's verdicts from the journal, given what
// the owner's settle changed and whether its fence found the index not
// holding its write.
func (j *journal) verdicts(late string, settleChanged, indexMismatch bool) verdict {
	j.mu.Lock()
	defer j.mu.Unlock()
	token, raised := -1, -1
	for i, e := range j.events {
		switch {
		case e.store == "" && e.call == stepToken:
			token = i
		case e.store == "" && e.call == stepRaised:
			raised = i
		}
	}
	after := func(i, step int) bool { return step >= 0 && i > step }
	v := verdict{index: notReached, graph: notReached, relational: notReached}
	var landed, early, ranOutOfTime, checkRefused bool
	for i, e := range j.events {
		if e.who != late {
			continue
		}
		_, fenced := errors.AsType[*project.FencedError](e.err)
		switch {
		case e.store == project.StoreIndex && e.call == "check" && fenced:
			checkRefused = true
		case e.store == project.StoreIndex && e.call == "write" && e.err == nil && after(i, token):
			landed = true
		case e.store == project.StoreIndex && e.call == "write" && e.err == nil:
			early = true
		case e.store == project.StoreIndex && e.call == "write":
			ranOutOfTime = true
		case e.store == project.StoreGraph:
			v.graph = transactional(e.err, fenced, after(i, raised))
		case e.store == project.StoreRelational:
			v.relational = transactional(e.err, fenced, after(i, token))
		}
	}
	switch {
	case landed && settleChanged:
		v.index = landedSettled
	case landed && indexMismatch:
		v.index = landedReprojected
	case landed:
		v.index = landedOverwritten
	case early:
		v.index = beforeToken
	case ranOutOfTime && checkRefused:
		v.index = ranOut
	case checkRefused:
		v.index = refusedAtCheck
	}
	return v
}

// transactional is the verdict of a write of the graph or the relational
// store, which checks the token in its transaction.
func transactional(err error, fenced, afterToken bool) string {
	switch {
	case fenced:
		return refused
	case err != nil:
		return fmt.Sprintf("failed: %v", err)
	case afterToken:
		return takenAfterToken
	default:
		return beforeToken
	}
}
