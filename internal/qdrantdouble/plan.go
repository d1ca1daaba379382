package qdrantdouble

import (
	"iter"
	"maps"
	"math/bits"
	"slices"

	"github.com/qdrant/go-client/qdrant"
)

// Filter planning. A filter's predicate decides which points pass; planning
// only decides which points the predicate is asked about. When the filter's
// must holds a condition that an index or an id list answers, the points that
// condition names are a superset of those that pass, so evaluating the whole
// filter on them gives exactly the full scan's result for a fraction of its
// cost. Every read and the filtered delete go through matching or candidates,
// so Count, Scroll, Facet and Delete are planned alike.

// filter is a compiled request filter: the predicate that decides, and the
// conditions that can narrow the points it has to see.
type filter struct {
	match predicate
	// narrowers are conditions every passing point satisfies: those of the
	// filter's must, and of the must of filters nested there.
	narrowers []narrower
}

// newFilter compiles a request filter; a nil filter matches every point.
func newFilter(f *qdrant.Filter) (*filter, error) {
	match, err := compileFilter(f)
	if err != nil {
		return nil, err
	}
	return &filter{match: match, narrowers: narrowersOf(f.GetMust())}, nil
}

// narrower is a must condition the planner can answer without looking at
// every point: a has_id, or a match (or match-any) of keywords or integers on
// a payload key, answered when the key has an index of that type.
type narrower struct {
	byID bool
	ids  []pointID // has_id's list, when byID

	key    string                   // the payload key of a match
	schema qdrant.PayloadSchemaType // the index type that answers it
	values []indexValue             // the values matched
}

// narrowersOf returns the narrowers among must conditions. It looks only at
// conditions compileFilter has accepted.
func narrowersOf(must []*qdrant.Condition) []narrower {
	var out []narrower
	for _, c := range must {
		switch v := c.GetConditionOneOf().(type) {
		case *qdrant.Condition_HasId:
			if ids, err := parsePointIDs(v.HasId.GetHasId()); err == nil {
				out = append(out, narrower{byID: true, ids: ids})
			}
		case *qdrant.Condition_Field:
			if n, ok := fieldNarrower(v.Field); ok {
				out = append(out, n)
			}
		case *qdrant.Condition_Filter:
			// A nested filter passes only when all of its must does.
			out = append(out, narrowersOf(v.Filter.GetMust())...)
		}
	}
	return out
}

// fieldNarrower returns the narrower of a field condition that is a match and
// nothing else. is_empty and is_null override a match, and a range beside it
// is an alternative to it (compileFieldCondition), so either makes the match
// values no bound on the points that pass.
func fieldNarrower(fc *qdrant.FieldCondition) (narrower, bool) {
	if fc.IsEmpty != nil || fc.IsNull != nil || fc.Range != nil || fc.DatetimeRange != nil ||
		fc.GeoBoundingBox != nil || fc.GeoRadius != nil || fc.GeoPolygon != nil || fc.ValuesCount != nil {
		return narrower{}, false
	}
	n := narrower{key: fc.GetKey(), schema: qdrant.PayloadSchemaType_Keyword}
	switch m := fc.GetMatch().GetMatchValue().(type) {
	case *qdrant.Match_Keyword:
		n.values = []indexValue{{str: m.Keyword}}
	case *qdrant.Match_Keywords:
		n.values = make([]indexValue, len(m.Keywords.GetStrings()))
		for i, s := range m.Keywords.GetStrings() {
			n.values[i] = indexValue{str: s}
		}
	case *qdrant.Match_Integer:
		n.schema = qdrant.PayloadSchemaType_Integer
		n.values = []indexValue{{isInt: true, num: m.Integer}}
	case *qdrant.Match_Integers:
		n.schema = qdrant.PayloadSchemaType_Integer
		n.values = make([]indexValue, len(m.Integers.GetIntegers()))
		for i, v := range m.Integers.GetIntegers() {
			n.values[i] = indexValue{isInt: true, num: v}
		}
	default:
		return narrower{}, false
	}
	return n, true
}

// estimate returns an upper bound on the points n names in c (a value or an
// id named twice counts twice), or false when c cannot answer n: a match needs
// an index of its own type on its key, as a keyword index knows nothing of
// the integers under its key, and an integer index nothing of the strings.
func (c *collection) estimate(n *narrower) (int, bool) {
	if n.byID {
		return len(n.ids), true
	}
	idx, ok := c.indexes[n.key]
	if !ok || idx.schema != n.schema {
		return 0, false
	}
	k := 0
	for _, v := range n.values {
		k += len(idx.points[v])
	}
	return k, true
}

// narrowed returns the stored points n names, each once, in id order. c must
// be able to answer n (estimate reports true).
func (c *collection) narrowed(n *narrower) []*point {
	var out []*point
	add := func(id pointID) {
		if p, ok := c.points[id]; ok {
			out = append(out, p)
		}
	}
	if n.byID {
		for _, id := range n.ids {
			add(id)
		}
	} else {
		idx := c.indexes[n.key]
		for _, v := range n.values {
			for id := range idx.points[v] {
				add(id)
			}
		}
	}
	slices.SortFunc(out, func(a, b *point) int { return a.id.compare(b.id) })
	// A has_id or a match-any may name an id or a value twice, and a point
	// whose array holds two of the values is under both.
	return slices.CompactFunc(out, func(a, b *point) bool { return a.id == b.id })
}

// candidates returns, in id order, the points of c that f must be evaluated
// on, taken from the narrower naming the fewest; ok is false when no
// narrower applies or when sorting its k points (k·log k comparisons) would
// cost more than asking the predicate about each of the collection's points,
// and the caller then scans the collection.
func (c *collection) candidates(f *filter) (points []*point, ok bool) {
	best, bestK := -1, 0
	for i := range f.narrowers {
		if k, ok := c.estimate(&f.narrowers[i]); ok && (best < 0 || k < bestK) {
			best, bestK = i, k
		}
	}
	if best < 0 || bestK*bits.Len(uint(bestK)) > len(c.points) {
		return nil, false
	}
	return c.narrowed(&f.narrowers[best]), true
}

// matching returns the points of c that pass f, in no particular order. The
// collection must not change while the sequence runs.
func (c *collection) matching(f *filter) iter.Seq[*point] {
	return func(yield func(*point) bool) {
		points := maps.Values(c.points)
		if cands, ok := c.candidates(f); ok {
			points = slices.Values(cands)
		}
		for p := range points {
			if f.match(p) && !yield(p) {
				return
			}
		}
	}
}

// scroll returns up to limit points that pass f, in id order from the first
// id at or after offset (nil: from the start), and the next point that
// passes, nil when there is none. A planned scroll sorts its candidates only;
// any other reads the collection's id order from offset and stops one point
// after the page, so an unfiltered page costs the page and a binary search.
func (c *collection) scroll(f *filter, offset *pointID, limit int) (page []*point, next *point) {
	var ordered iter.Seq[*point] = func(yield func(*point) bool) {
		for id := range c.order.from(offset) {
			if !yield(c.points[id]) {
				return
			}
		}
	}
	if cands, ok := c.candidates(f); ok {
		if offset != nil {
			from, _ := slices.BinarySearchFunc(cands, *offset, func(p *point, id pointID) int { return p.id.compare(id) })
			cands = cands[from:]
		}
		ordered = slices.Values(cands)
	}
	for p := range ordered {
		if !f.match(p) {
			continue
		}
		if len(page) == limit {
			return page, p
		}
		page = append(page, p)
	}
	return page, nil
}
