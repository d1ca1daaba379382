package qdrantdouble

import (
	"iter"
	"slices"

	"github.com/qdrant/go-client/qdrant"
)

// fieldIndex is a payload index created by CreateFieldIndex: an inverted index
// from each value the index holds to the points that hold it. Qdrant lists it
// in payload_schema and requires it for Facet, and both Qdrant and the double
// plan filters with it (plan.go).
//
// The collection keeps it exact on every write (collection.put, remove), under
// store.mu like the rest of the collection.
type fieldIndex struct {
	path   []string // the indexed key, parsed
	schema qdrant.PayloadSchemaType
	params *qdrant.PayloadIndexParams // nil when created without params

	// points maps each value to the ids of the points holding it; a value no
	// point holds has no entry.
	points map[indexValue]map[pointID]struct{}
	// count is the number of points holding at least one value, which Qdrant
	// reports as the index's points in payload_schema.
	count uint64
}

// indexValue is one value a keyword or integer index holds.
type indexValue struct {
	isInt bool
	str   string
	num   int64
}

func newFieldIndex(path []string, schema qdrant.PayloadSchemaType, params *qdrant.PayloadIndexParams) *fieldIndex {
	return &fieldIndex{path: path, schema: schema, params: params, points: make(map[indexValue]map[pointID]struct{})}
}

// facetable reports whether Qdrant can facet on the index: a keyword index, or
// an integer index that keeps its value lookup map.
func (f *fieldIndex) facetable() bool {
	switch f.schema {
	case qdrant.PayloadSchemaType_Keyword:
		return true
	case qdrant.PayloadSchemaType_Integer:
		p := f.params.GetIntegerIndexParams()
		return p == nil || p.Lookup == nil || *p.Lookup
	default:
		return false
	}
}

// appendValues appends to out the distinct values of p the index holds: those
// under its key, or the elements of an array there, that have the index's
// type (Qdrant's keyword index keeps strings, its integer index integers).
func (f *fieldIndex) appendValues(out []indexValue, p *point) []indexValue {
	v, ok := lookup(p.payload, f.path)
	if !ok {
		return out
	}
	n := len(out)
	for _, e := range elements(v) {
		var iv indexValue
		switch k := e.GetKind().(type) {
		case *qdrant.Value_StringValue:
			if f.schema != qdrant.PayloadSchemaType_Keyword {
				continue
			}
			iv = indexValue{str: k.StringValue}
		case *qdrant.Value_IntegerValue:
			if f.schema != qdrant.PayloadSchemaType_Integer {
				continue
			}
			iv = indexValue{isInt: true, num: k.IntegerValue}
		default:
			continue
		}
		if !slices.Contains(out[n:], iv) {
			out = append(out, iv)
		}
	}
	return out
}

// add indexes a point that is not in the index.
func (f *fieldIndex) add(p *point) {
	var buf [4]indexValue
	vals := f.appendValues(buf[:0], p)
	for _, v := range vals {
		ids, ok := f.points[v]
		if !ok {
			ids = make(map[pointID]struct{})
			f.points[v] = ids
		}
		ids[p.id] = struct{}{}
	}
	if len(vals) > 0 {
		f.count++
	}
}

// remove takes out a point that add indexed, with the payload it had then.
func (f *fieldIndex) remove(p *point) {
	var buf [4]indexValue
	vals := f.appendValues(buf[:0], p)
	for _, v := range vals {
		ids := f.points[v]
		delete(ids, p.id)
		if len(ids) == 0 {
			delete(f.points, v)
		}
	}
	if len(vals) > 0 {
		f.count--
	}
}

// idOrder holds the ids of a collection's points in Qdrant's order (numeric
// ids first, then UUIDs), so that a scroll starts at its offset with a binary
// search and reads a page without sorting the collection.
//
// It is a list of sorted blocks of at most orderBlock ids, every id of a block
// before every id of the next, and no block empty. Finding an id is two
// binary searches; inserting or removing one moves at most a block of ids,
// plus the list of block headers when a block splits, empties or merges,
// which is rare. The simpler choices were measured with BenchmarkDrainBatch
// and BenchmarkReconcileScan at 100,000 points and lost: one sorted slice
// moves half the collection on every insert (a batch took 250 ms, against 10
// here), and a sorted slice rebuilt on the first read after a write sorts the
// whole collection for every page of a scan that runs while the projector
// writes (45 ms a page and batch, against 16 here); it would also write on
// reads, which hold store.mu shared.
type idOrder struct {
	blocks [][]pointID
}

// orderBlock bounds a block: moving up to 512 ids of 32 bytes on an insert
// costs about as much as the insert's map write, and 200,000 points make only
// a few hundred blocks.
const orderBlock = 512

// block returns the block id is in or belongs in: the first whose last id is
// at or after id, or the last block. There is at least one block.
func (o *idOrder) block(id pointID) int {
	i, _ := slices.BinarySearchFunc(o.blocks, id, func(b []pointID, id pointID) int { return b[len(b)-1].compare(id) })
	return min(i, len(o.blocks)-1)
}

// insert adds id unless it is there already.
func (o *idOrder) insert(id pointID) {
	if len(o.blocks) == 0 {
		o.blocks = append(o.blocks, append(make([]pointID, 0, orderBlock), id))
		return
	}
	i := o.block(id)
	b := o.blocks[i]
	j, found := slices.BinarySearchFunc(b, id, pointID.compare)
	if found {
		return
	}
	b = slices.Insert(b, j, id)
	o.blocks[i] = b
	if len(b) > orderBlock {
		half := len(b) / 2
		right := append(make([]pointID, 0, orderBlock), b[half:]...)
		o.blocks[i] = b[:half]
		o.blocks = slices.Insert(o.blocks, i+1, right)
	}
}

// remove takes id out if it is there. A block that falls below a quarter full
// merges with a neighbour when both fit in one block, so that blocks stay
// large under any mix of writes.
func (o *idOrder) remove(id pointID) {
	if len(o.blocks) == 0 {
		return
	}
	i := o.block(id)
	j, found := slices.BinarySearchFunc(o.blocks[i], id, pointID.compare)
	if !found {
		return
	}
	b := slices.Delete(o.blocks[i], j, j+1)
	o.blocks[i] = b
	switch {
	case len(b) == 0:
		o.blocks = slices.Delete(o.blocks, i, i+1)
	case len(b) >= orderBlock/4:
	case i+1 < len(o.blocks):
		o.merge(i)
	case i > 0:
		o.merge(i - 1)
	}
}

// merge joins blocks i and i+1 if they fit in one.
func (o *idOrder) merge(i int) {
	if len(o.blocks[i])+len(o.blocks[i+1]) > orderBlock {
		return
	}
	o.blocks[i] = append(o.blocks[i], o.blocks[i+1]...)
	o.blocks = slices.Delete(o.blocks, i+1, i+2)
}

// from returns the ids at or after start (every id if start is nil), in
// order. The order must not change while the sequence runs.
func (o *idOrder) from(start *pointID) iter.Seq[pointID] {
	return func(yield func(pointID) bool) {
		i, j := 0, 0
		if start != nil && len(o.blocks) > 0 {
			i = o.block(*start)
			j, _ = slices.BinarySearchFunc(o.blocks[i], *start, pointID.compare)
		}
		for ; i < len(o.blocks); i, j = i+1, 0 {
			for _, id := range o.blocks[i][j:] {
				if !yield(id) {
					return
				}
			}
		}
	}
}
