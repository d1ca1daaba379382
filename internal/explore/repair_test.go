package explore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/store/postgres"
)

// The repair's fault points (internal/reconcile): after it read the
// relational copy and before its writes, between them, and before it
// deletes documents the decision store does not know.
var repairPoints = []string{"before-repair-write", "repair-after-index", "repair-after-graph", "before-repair-delete"}

// The orders of a repair case, once the owner is held at its point and the
// repair at its own: the repair to its end, then the owner; or the repair
// stalls past its lease, which ends, and the owner goes on to its end
// before the repair goes on.
const (
	repairFirst order = "repair-first"
	leaseLost   order = "lease-lost"
)

// repairCases are the pairs of the owner's points and the repair's, for
// every kind, with the owner's batches split in two.
func repairCases() []kase {
	var out []kase
	s := splits[0]
	for _, k := range kinds {
		for _, b := range ownerPoints(s) {
			for _, r := range repairPoints {
				for _, o := range []order{repairFirst, leaseLost} {
					out = append(out, kase{kind: k, split: s, repair: r, owner: b, order: o})
				}
			}
		}
	}
	return out
}

// caseLease is the repair's lease, which the case ends when the repair
// stalls past it: in PostgreSQL, so that run's writes go on, and in the
// repair's own view, as its clock would have ended it a margin before.
type caseLease struct {
	*postgres.Lease
	lost atomic.Bool
}

var errCaseLeaseLost = errors.New("the repair lease was lost: it expired while the repair stalled")

func (l *caseLease) WriteDeadline() (time.Time, error) {
	if l.lost.Load() {
		return time.Time{}, errCaseLeaseLost
	}
	return l.Lease.WriteDeadline()
}

// recordedStore records the deletions of unknown documents of a store as
// a repair reads and deletes it.
type recordedStore struct {
	reconcile.Store
	j   *journal
	who string
}

func (r recordedStore) DeleteDocuments(ctx context.Context, keys []string) error {
	err := r.Store.DeleteDocuments(ctx, keys)
	r.j.add(entry{who: r.who, store: r.Store.Name(), call: "delete", err: err})
	return err
}

// discard is a reconcile report nobody reads: the case compares the
// stores itself.
type discard struct{}

func (discard) Report(*reconcile.Discrepancy) error { return nil }

// The step of a journal when the case ends the repair's lease.
const stepLeaseLost = "lease lost"

// runRepair forces a case of a repair beside the owner: the prefix
// committed by a first owner; the owner run to c.owner, its batches half
// written; then `reconcile --repair --delete-orphans` of the case's
// document, run to c.repair, having read what the owner left; then both let
// go in c.order. The repair must write nothing after its lease ended, the
// owner must commit the whole range without a dead letter or a halt, and
// every store must end as one clean delivery of the log leaves it.
func (e *explorer) runRepair(c kase) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The first owner stops cleanly: the owner waits out no late window.
	cr, err := e.setUp(ctx, c, true)
	if err != nil {
		return "", err
	}
	ownerGate, repairGate := newGate(c.owner), newGate(c.repair)
	owner := e.member("owner", ownerGate, cr.clock, cr.j, c.kind.overwrite)
	b := cr.startOwner(ctx, owner, ownerGate)
	defer func() { _ = b.finish() }()
	if out, err := reached(b, "the owner", c.owner, ownerGate); out != "" || err != nil {
		return out, err
	}

	lease := &caseLease{}
	rel, j := e.stores.repairRel, cr.j
	r := startWriter("the repair", repairGate, func() error {
		l, err := rel.TakeRepairLease(ctx, postgres.LeaseConfig{Holder: "explorer", TTL: time.Minute})
		if err != nil {
			return err
		}
		defer l.Release(context.WithoutCancel(ctx))
		lease.Lease = l
		index := recordedIndex{Index: e.stores.index, j: j, who: "repair"}
		graph := recordedGraph{Graph: e.stores.graph, j: j, who: "repair"}
		relational := recordedRelational{Relational: rel, j: j, who: "repair"}
		run := reconcile.New(reconcile.Config{Prefix: fmt.Sprintf("%s/%d/", e.stores.run, cr.part), Repair: true, DeleteOrphans: true}, zap.NewNop(), reconcile.Deps{
			Decisions: rel, Source: rel,
			Stores: []reconcile.Store{recordedStore{e.stores.index, j, "repair"}, recordedStore{e.stores.graph, j, "repair"}, recordedStore{rel, j, "repair"}},
			Writes: reconcile.WriteOrder{Index: index, Graph: graph, Relational: relational, Faults: repairGate},
			Lease:  lease, Faults: repairGate,
		})
		_, err = run.Run(ctx, discard{})
		return err
	})
	defer func() { _ = r.finish() }()
	if out, err := reached(r, "the repair", c.repair, repairGate); out != "" || err != nil {
		return out, err
	}

	if c.order == leaseLost {
		// The repair stalls past its lease: it ends in PostgreSQL, and run
		// takes its turn.
		if _, err := rel.Pool().Exec(ctx, `UPDATE repair_lease SET expires_at = now() WHERE expires_at > now()`); err != nil {
			return "", err
		}
		lease.lost.Store(true)
		j.add(entry{who: "repair", call: stepLeaseLost})
		if err := b.finish(); err != nil {
			return "", err
		}
	}
	if err := r.finish(); err != nil {
		return "", err
	}
	if err := b.finish(); err != nil {
		return "", err
	}

	problems, err := cr.problems(ctx, b, owner)
	if err != nil {
		return "", err
	}
	if c.order == repairFirst && r.err != nil {
		problems = append(problems, fmt.Sprintf("the repair failed under its lease: %v", r.err))
	}
	if c.order == leaseLost && r.err == nil && j.repairWrote() {
		problems = append(problems, "the repair ended without noticing its lost lease")
	}
	v := j.repairVerdicts(r.err != nil)
	for _, s := range []string{v.index, v.graph, v.relational} {
		if s == writtenAfterLease {
			problems = append(problems, "the repair wrote a store after its lease ended")
		}
	}
	if len(problems) == 0 {
		return v.String(), nil
	}
	return "", fmt.Errorf("%s\nrepair: passed %s, returned %v\nowner: passed %s\nowner's log:\n%s",
		joinLines(problems), repairGate.trace(), r.err, ownerGate.trace(), logText(owner.logs))
}

// The verdicts of a repair's writes in a store.
const (
	// underLease: it wrote the store while its lease held.
	underLease = "written under its lease"
	// stoppedLeaseLost: it stopped before writing the store, its lease
	// lost.
	stoppedLeaseLost = "not written: its lease was lost"
	// writtenAfterLease: it wrote the store after its lease ended, a hole
	// that fails the case.
	writtenAfterLease = "WRITTEN AFTER ITS LEASE ENDED"
)

// repairWrote reports whether the repair wrote or deleted anything.
func (j *journal) repairWrote() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.events {
		if e.who == "repair" && e.store != "" && e.err == nil {
			return true
		}
	}
	return false
}

// repairVerdicts reads what became of the repair's writes of each store;
// stopped says that the repair ended with its lease lost.
func (j *journal) repairVerdicts(stopped bool) verdict {
	j.mu.Lock()
	defer j.mu.Unlock()
	lost := -1
	for i, e := range j.events {
		if e.who == "repair" && e.store == "" && e.call == stepLeaseLost {
			lost = i
		}
	}
	got := map[string]string{}
	for i, e := range j.events {
		if e.who != "repair" || e.store == "" || (e.call != "write" && e.call != "delete") {
			continue
		}
		switch {
		case e.err == nil && lost >= 0 && i > lost:
			got[e.store] = writtenAfterLease
		case e.err == nil && got[e.store] != writtenAfterLease:
			got[e.store] = underLease
		}
	}
	unwritten := notReached
	if stopped {
		unwritten = stoppedLeaseLost
	}
	v := verdict{index: unwritten, graph: unwritten, relational: unwritten}
	for store, s := range got {
		switch store {
		case project.StoreIndex:
			v.index = s
		case project.StoreGraph:
			v.graph = s
		case project.StoreRelational:
			v.relational = s
		}
	}
	return v
}
