// Package generation is the registry of index generations: each a physical
// collection of the vector index with the embedder that fills it. Readers
// search one stable name, a collection alias, which points at the live
// generation; the projector writes the physical collections only, so that a
// new generation (another model, another dimension) can be built beside
// the live one and switched to in one alias update.
//
// The registry is kept in PostgreSQL (store/postgres), so every member of
// the group agrees on it. This package decides what the registry must hold
// when it is empty (Bootstrap) and whether a member can write every
// generation it holds (Set.Check); cmd/projector wires it.
package generation

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State is where a generation is in its life.
type State string

// The states of a generation. Only one generation is live at a time.
const (
	// Building: created beside the live one and being filled; run writes it.
	Building State = "building"
	// Live: the alias points at it; run writes it.
	Live State = "live"
	// Retiring: the alias moved away from it; run still writes it until it
	// is retired, so that switching back stays possible meanwhile.
	Retiring State = "retiring"
	// Retired: no longer written; its collection is deleted after the
	// grace period.
	Retired State = "retired"
	// Aborted: dropped while it was being built.
	Aborted State = "aborted"
)

// Written reports whether run writes a generation in state s.
func (s State) Written() bool { return s == Building || s == Live || s == Retiring }

// The embedder kinds and distances this build knows.
const (
	EmbedderHashing = "hashing"
	EmbedderHTTP    = "http"
	DistanceCosine  = "cosine"
)

// Embedder names what computes a generation's vectors. Two generations
// with equal Embedders hold the same vectors for the same text.
type Embedder struct {
	// Kind is hashing or http.
	Kind string
	// Model is the model name sent to an http endpoint ("" for hashing).
	Model string
	// URL is an http embedder's endpoint ("" for hashing). It is not a
	// secret; the API key comes from each member's environment.
	URL string
	// Dim is the vector dimension.
	Dim int
	// Distance is the collection's distance: cosine.
	Distance string
}

func (e Embedder) String() string {
	s := e.Kind
	if e.Model != "" {
		s += " " + e.Model
	}
	return s + ", dimension " + strconv.Itoa(e.Dim) + ", " + e.Distance
}

// Same reports whether e and o compute the same vectors. The URL does not
// count: one model may be served at two addresses.
func (e Embedder) Same(o Embedder) bool {
	return e.Kind == o.Kind && e.Model == o.Model && e.Dim == o.Dim && e.Distance == o.Distance
}

// known returns an error unless this build can compute e's vectors.
func (e Embedder) known() error {
	switch {
	case e.Kind != EmbedderHashing && e.Kind != EmbedderHTTP:
		return fmt.Errorf("embedder kind %q is not known to this build", e.Kind)
	case e.Distance != DistanceCosine:
		return fmt.Errorf("distance %q is not known to this build", e.Distance)
	case e.Dim <= 0:
		return fmt.Errorf("dimension %d", e.Dim)
	case e.Kind == EmbedderHTTP && (e.Model == "" || e.URL == ""):
		return errors.New("an http embedder without a model or an endpoint")
	}
	return nil
}

// Generation is one row of the registry.
type Generation struct {
	// Alias is the collection alias whose generation it is: each alias
	// (--qdrant-collection) has generations of its own.
	Alias  string
	Number int
	// Collection is the physical collection; it equals the alias only for
	// a legacy generation (a collection made before generations).
	Collection string
	Embedder   Embedder
	State      State
	// Fill is how far the fill of a generation built beside the live one
	// is, as its last page recorded.
	Fill Progress
}

// Legacy reports whether g is a collection made before generations, named
// as the alias is, so that no alias can exist beside it.
func (g Generation) Legacy(alias string) bool { return g.Collection == alias }

func (g Generation) String() string {
	return fmt.Sprintf("generation %d (%s, collection %s, %s)", g.Number, g.State, g.Collection, g.Embedder)
}

// CollectionOf is the physical collection of generation n under alias.
func CollectionOf(alias string, n int) string { return alias + "_g" + strconv.Itoa(n) }

// Set is the registry's generations, by number.
type Set []Generation

// Live is the live generation; false when there is none (an empty
// registry).
func (s Set) Live() (Generation, bool) {
	for _, g := range s {
		if g.State == Live {
			return g, true
		}
	}
	return Generation{}, false
}

// Abortable is the generation being built, or else the last generation
// aborted (whose collection an abort run again may still have to
// delete); false when there is neither.
func (s Set) Abortable() (Generation, bool) { return s.ending(Building, Aborted) }

// Retirable is the oldest retiring generation, or else the last one
// retired (whose collection a retire run again may still have to
// delete); false when there is neither.
func (s Set) Retirable() (Generation, bool) { return s.ending(Retiring, Retired) }

// ending is the first generation in state from, or else the last one in
// state to: what a step from one to the other acts on, run again.
func (s Set) ending(from, to State) (Generation, bool) {
	var last *Generation
	for i, g := range s {
		if g.State == from {
			return g, true
		}
		if g.State == to {
			last = &s[i]
		}
	}
	if last == nil {
		return Generation{}, false
	}
	return *last, true
}

// Reconciled returns generation n, the one a reconcile compares (0: the
// live one). Only a generation run writes can be compared, and only the
// live one repaired: a repair writes the relational copy's vectors, which
// are the live generation's model's.
func (s Set) Reconciled(n int, repair bool) (Generation, error) {
	live, ok := s.Live()
	if n == 0 && ok {
		return live, nil
	}
	for _, g := range s {
		if g.Number != n {
			continue
		}
		switch {
		case !g.State.Written():
			return Generation{}, &ConflictError{Why: fmt.Sprintf("%s is not written: there is nothing to compare", g)}
		case repair && g.State != Live:
			return Generation{}, &ConflictError{Why: fmt.Sprintf("%s cannot be repaired: a repair writes the relational copy's vectors, the live generation's; compare it without --repair, and abort and start it again if it differs", g)}
		}
		return g, nil
	}
	return Generation{}, &ConflictError{Why: fmt.Sprintf("there is no generation %d", n)}
}

// Written is the generations run writes, by number.
func (s Set) Written() Set {
	var out Set
	for _, g := range s {
		if g.State.Written() {
			out = append(out, g)
		}
	}
	return out
}

// Check returns an error unless a member whose own embedder flags say
// flags can write every generation of s: this build knows each written
// generation's embedder, and flags are one of theirs (a member configured
// for another model is misconfigured, and would otherwise run on without
// a word with the registry's). A member that cannot write a generation
// refuses to start rather than skip it: the generation would miss its
// writes.
func (s Set) Check(flags Embedder) error {
	written := s.Written()
	if _, ok := s.Live(); !ok {
		return errors.New("the generation registry has no live generation: run projector migrate")
	}
	matched := false
	var names []string
	for _, g := range written {
		if err := g.Embedder.known(); err != nil {
			return fmt.Errorf("%s: %w; run a build that knows it", g, err)
		}
		matched = matched || g.Embedder.Same(flags)
		names = append(names, g.String())
	}
	if !matched {
		return fmt.Errorf("this member's embedder flags (%s) match no generation it must write: %s; set them to one of these",
			flags, strings.Join(names, "; "))
	}
	return nil
}

// Registry is the generations' record: the relational store.
type Registry interface {
	// Generations returns every generation of alias, by number.
	Generations(ctx context.Context, alias string) (Set, error)
	// RegisterFirst records g as generation 1 of g.Alias unless the
	// registry holds a generation of it already, and returns the alias's
	// generations: members that bootstrap at once all get the first
	// one's.
	RegisterFirst(ctx context.Context, g Generation) (Set, error)
}

// Names is what Bootstrap needs of the index server: what a name is.
type Names interface {
	// Resolve says what name is in the index server: none, a
	// collection, or an alias of the collection target.
	Resolve(ctx context.Context, name string) (kind NameKind, target string, err error)
}

// NameKind is what a name of the index server is.
type NameKind int

// The kinds of names.
const (
	NameNone NameKind = iota
	NameCollection
	NameAlias
)

// Bootstrap returns the registry's generations, first registering
// generation 1 with the embedder emb when the registry is empty: the
// collection alias itself when a collection of that name exists (a
// deployment from before generations, whose readers search it by name),
// else alias_g1, which the caller creates with the alias. An alias of
// that name that the registry does not know is refused: something else
// made it, and writing beside it could mislead its readers.
func Bootstrap(ctx context.Context, reg Registry, names Names, alias string, emb Embedder) (Set, error) {
	set, err := reg.Generations(ctx, alias)
	if err != nil || len(set) > 0 {
		return set, err
	}
	if err := emb.known(); err != nil {
		return nil, fmt.Errorf("embedder %s: %w", emb, err)
	}
	kind, target, err := names.Resolve(ctx, alias)
	if err != nil {
		return nil, err
	}
	first := Generation{Alias: alias, Number: 1, Collection: CollectionOf(alias, 1), Embedder: emb, State: Live}
	switch kind {
	case NameCollection:
		first.Collection = alias
	case NameAlias:
		if target != first.Collection {
			return nil, fmt.Errorf("the index server has an alias %s of collection %s that the generation registry does not know: delete the alias, or name another collection (--qdrant-collection)", alias, target)
		}
	}
	return reg.RegisterFirst(ctx, first)
}

// Switch is what a switch of the alias does: the registry makes To live
// and From retiring (retired when From is a legacy generation, whose
// collection the alias replaces), then the alias is pointed at To.
type Switch struct {
	To, From Generation
	// Registered says that the registry has To live already: a switch run
	// again after the registry's step, which has only the alias to move.
	Registered bool
}

// FromState is the state the registry gives the generation the alias
// leaves: retiring, so that run still writes it and a switch back stays
// possible, unless it is a legacy generation, which the alias replaces:
// its collection is deleted, so run must stop writing it.
func (sw Switch) FromState() State {
	if sw.From.Legacy(sw.From.Alias) {
		return Retired
	}
	return Retiring
}

// Switching returns the switch of the alias to generation to (0: the
// generation being built): one being built, or a retiring one (a switch
// back, which run still writes); or, when to is the live one (by default:
// when none is being built), the switch the registry recorded already,
// whose alias may not have moved yet. A generation whose fill is not done
// is refused unless force: readers would search a partial index.
func (s Set) Switching(to int, force bool) (Switch, error) {
	live, ok := s.Live()
	if !ok {
		return Switch{}, errors.New("the generation registry has no live generation: run projector migrate")
	}
	var target *Generation
	for i, g := range s {
		if (to == 0 && g.State == Building) || (to != 0 && g.Number == to) {
			target = &s[i]
		}
	}
	switch {
	case to == 0 && target == nil, target != nil && target.State == Live:
		return s.switched(live)
	case target == nil:
		return Switch{}, &ConflictError{Why: fmt.Sprintf("there is no generation %d", to)}
	case target.State == Building && !target.Fill.Done && !force:
		return Switch{}, &ConflictError{Why: fmt.Sprintf("the fill of %s is not done (%d documents so far): run projector generation start --execute until it says filled, or switch with --force to a partial index", target, target.Fill.Documents)}
	case target.State != Building && target.State != Retiring:
		return Switch{}, &ConflictError{Why: fmt.Sprintf("%s is not written: only a generation being built, or a retiring one, can be switched to", target)}
	}
	return Switch{To: *target, From: live}, nil
}

// switched is the switch the registry recorded to live: from the newest
// other generation the alias left (retiring, or retired since).
func (s Set) switched(live Generation) (Switch, error) {
	var from *Generation
	for i, g := range s {
		if g.Number != live.Number && (g.State == Retiring || g.State == Retired) {
			from = &s[i]
		}
	}
	if from == nil {
		return Switch{}, &ConflictError{Why: fmt.Sprintf("no generation is being built, and the live %s replaced none: nothing to switch to (projector generation start builds one)", live)}
	}
	return Switch{To: live, From: *from, Registered: true}, nil
}

// Compare is one comparison of a generation's collection with the
// relational copy: the documents that differ, each with the version the
// relational copy holds of it.
type Compare func(ctx context.Context) (differ map[string]int64, err error)

// Verify compares up to attempts times, pause apart, and returns the
// documents every comparison found different at the same version (none:
// the generation is equal to the relational copy). While run writes, a
// document being written differs for a moment: its index write lands
// before its relational one. One that run wrote again between two
// comparisons has another version in the second, and that write reached
// the generation too (run writes every generation, fenced), so it does
// not count; one that differs still at the same version differs for real.
func Verify(ctx context.Context, compare Compare, attempts int, pause time.Duration) (map[string]int64, error) {
	var still map[string]int64
	for i := range attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(pause):
			}
		}
		differ, err := compare(ctx)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			for key, v := range differ {
				if w, ok := still[key]; !ok || w != v {
					delete(differ, key)
				}
			}
		}
		if still = differ; len(still) == 0 {
			return nil, nil
		}
	}
	return still, nil
}
