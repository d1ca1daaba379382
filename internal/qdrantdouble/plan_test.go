package qdrantdouble

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
)

// planWorld drives one collection through random writes and random filters
// and checks every planned answer against a full scan of the collection.
type planWorld struct {
	t      *testing.T
	rng    *rand.Rand
	points *pointsService
	store  *store
	uuids  []string // the pool UUID ids are drawn from, so that writes overwrite
	// planned and scanned count the filters answered each way, so that a run
	// shows it exercised both.
	planned, scanned int
	nonEmpty         int // filters some point passed
}

func newPlanWorld(t *testing.T, seed uint64) *planWorld {
	t.Helper()
	s := newStore()
	w := &planWorld{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), points: &pointsService{store: s}, store: s}
	for i := range 400 {
		w.uuids = append(w.uuids, uuid.NewSHA1(uuid.NameSpaceURL, fmt.Append(nil, seed, i)).String())
	}
	cols := &collectionsService{store: s}
	_, err := cols.Create(t.Context(), &qdrant.CreateCollection{
		CollectionName: "c",
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 2, Distance: qdrant.Distance_Dot}),
	})
	if err != nil {
		t.Fatalf("create collection: %v", err)
	}
	return w
}

// The payload keys of the random points: k is keyword-indexed, n
// integer-indexed, m.k keyword-indexed under an object, u never indexed.
// Every key gets values of every type, so that a match meets values its
// index does not hold.
var planKeys = []string{"k", "n", "m.k", "u"}

func (w *planWorld) createIndex(key string, typ qdrant.FieldType) {
	w.t.Helper()
	_, err := w.points.CreateFieldIndex(w.t.Context(), &qdrant.CreateFieldIndexCollection{CollectionName: "c", FieldName: key, FieldType: &typ})
	if err != nil {
		w.t.Fatalf("create index %s: %v", key, err)
	}
}

func (w *planWorld) collection() *collection {
	return w.store.collections["c"]
}

func (w *planWorld) id() *qdrant.PointId {
	if w.rng.IntN(2) == 0 {
		return qdrant.NewIDNum(uint64(w.rng.IntN(600)))
	}
	return qdrant.NewIDUUID(w.uuids[w.rng.IntN(len(w.uuids))])
}

func (w *planWorld) ids(n int) []*qdrant.PointId {
	out := make([]*qdrant.PointId, n)
	for i := range out {
		out[i] = w.id()
	}
	return out
}

// keyword and integer draw from small sets, so that values repeat.
func (w *planWorld) keyword() string { return fmt.Sprint("v", w.rng.IntN(30)) }
func (w *planWorld) integer() int64  { return int64(w.rng.IntN(30)) }

// value is a random payload value of any type a condition treats apart.
func (w *planWorld) value(depth int) any {
	switch r := w.rng.IntN(20); {
	case r < 7:
		return w.keyword()
	case r < 13:
		return w.integer()
	case r == 13:
		return float64(w.integer()) // a double is no integer
	case r == 14:
		return nil
	case r == 15:
		return w.rng.IntN(2) == 0
	case r == 16:
		return []any{}
	case r == 17 && depth == 0:
		return map[string]any{"k": w.value(1)}
	default:
		list := make([]any, 1+w.rng.IntN(3))
		for i := range list {
			list[i] = w.value(1)
		}
		return list
	}
}

func (w *planWorld) point() *qdrant.PointStruct {
	payload := map[string]any{}
	for _, key := range []string{"k", "n", "u"} {
		if w.rng.IntN(8) != 0 {
			payload[key] = w.value(0)
		}
	}
	if w.rng.IntN(4) != 0 {
		payload["m"] = map[string]any{"k": w.value(0)}
	}
	return &qdrant.PointStruct{Id: w.id(), Vectors: qdrant.NewVectors(1, 0), Payload: qdrant.NewValueMap(payload)}
}

func (w *planWorld) upsert(n int) {
	w.t.Helper()
	points := make([]*qdrant.PointStruct, n)
	for i := range points {
		points[i] = w.point()
	}
	if _, err := w.points.Upsert(w.t.Context(), &qdrant.UpsertPoints{CollectionName: "c", Points: points}); err != nil {
		w.t.Fatalf("upsert: %v", err)
	}
}

func (w *planWorld) key() string { return planKeys[w.rng.IntN(len(planKeys))] }

// match is a match condition of any kind on a random key, the kind unrelated
// to the key's index.
func (w *planWorld) match() *qdrant.Condition {
	key := w.key()
	switch w.rng.IntN(8) {
	case 0:
		return qdrant.NewMatch(key, w.keyword())
	case 1:
		return qdrant.NewMatchInt(key, w.integer())
	case 2:
		kws := make([]string, w.rng.IntN(6))
		for i := range kws {
			kws[i] = w.keyword()
		}
		return qdrant.NewMatchKeywords(key, kws...)
	case 3:
		ints := make([]int64, w.rng.IntN(6))
		for i := range ints {
			ints[i] = w.integer()
		}
		return qdrant.NewMatchInts(key, ints...)
	case 4:
		return qdrant.NewMatchExceptKeywords(key, w.keyword(), w.keyword())
	case 5:
		return qdrant.NewMatchExceptInts(key, w.integer())
	case 6:
		return qdrant.NewMatchBool(key, w.rng.IntN(2) == 0)
	default:
		// A match beside a range is an alternative to it, not a bound.
		return &qdrant.Condition{ConditionOneOf: &qdrant.Condition_Field{Field: &qdrant.FieldCondition{
			Key: key, Match: &qdrant.Match{MatchValue: &qdrant.Match_Keyword{Keyword: w.keyword()}},
			Range: &qdrant.Range{Lt: qdrant.PtrOf(float64(w.integer()))},
		}}}
	}
}

func (w *planWorld) condition(depth int) *qdrant.Condition {
	switch r := w.rng.IntN(14); {
	case r < 6:
		return w.match()
	case r < 8:
		return qdrant.NewHasID(w.ids(w.rng.IntN(12))...)
	case r == 8:
		return qdrant.NewRange(w.key(), &qdrant.Range{Gte: qdrant.PtrOf(float64(w.integer())), Lt: qdrant.PtrOf(float64(w.integer() + 10))})
	case r == 9:
		return qdrant.NewIsEmpty(w.key())
	case r == 10:
		return qdrant.NewIsNull(w.key())
	case r == 11:
		// A field condition whose is_empty overrides its match.
		return &qdrant.Condition{ConditionOneOf: &qdrant.Condition_Field{Field: &qdrant.FieldCondition{
			Key: w.key(), IsEmpty: qdrant.PtrOf(w.rng.IntN(2) == 0),
			Match: &qdrant.Match{MatchValue: &qdrant.Match_Keyword{Keyword: w.keyword()}},
		}}}
	default:
		if depth >= 2 {
			return w.match()
		}
		return qdrant.NewFilterAsCondition(w.filter(depth + 1))
	}
}

func (w *planWorld) conditions(n, depth int) []*qdrant.Condition {
	out := make([]*qdrant.Condition, n)
	for i := range out {
		out[i] = w.condition(depth)
	}
	return out
}

// filter is a random filter; must gets most conditions, as it is what plans.
func (w *planWorld) filter(depth int) *qdrant.Filter {
	f := &qdrant.Filter{
		Must:    w.conditions(w.rng.IntN(4), depth),
		MustNot: w.conditions(w.rng.IntN(3), depth),
		Should:  w.conditions(w.rng.IntN(3), depth),
	}
	if w.rng.IntN(6) == 0 {
		f.MinShould = &qdrant.MinShould{Conditions: w.conditions(1+w.rng.IntN(3), depth), MinCount: uint64(w.rng.IntN(3))}
	}
	return f
}

// scan is the reference: the ids of the points that pass f, found by asking
// the predicate about every point, in Qdrant's order.
func scan(c *collection, f *filter) []pointID {
	var out []pointID
	for _, p := range c.points {
		if f.match(p) {
			out = append(out, p.id)
		}
	}
	slices.SortFunc(out, pointID.compare)
	return out
}

func pointIDs(points []*point) []pointID {
	out := make([]pointID, len(points))
	for i, p := range points {
		out[i] = p.id
	}
	return out
}

// check compares every planned way of answering q with the full scan.
func (w *planWorld) check(q *qdrant.Filter) {
	w.t.Helper()
	f, err := newFilter(q)
	if err != nil {
		w.t.Fatalf("compile filter %v: %v", q, err)
	}
	c := w.collection()
	want := scan(c, f)
	w.nonEmpty += min(len(want), 1)

	if _, ok := c.candidates(f); ok {
		w.planned++
	} else {
		w.scanned++
	}
	got := pointIDs(slices.Collect(c.matching(f)))
	slices.SortFunc(got, pointID.compare)
	if !slices.Equal(got, want) {
		w.t.Fatalf("filter %v: matching got %v, want %v", q, got, want)
	}
	// Every narrower the collection can answer must name a superset of the
	// result, whether or not the planner would pick it.
	for i := range f.narrowers {
		n := &f.narrowers[i]
		k, ok := c.estimate(n)
		if !ok {
			continue
		}
		cands := c.narrowed(n)
		if len(cands) > k {
			w.t.Fatalf("filter %v: narrower %+v: got %d candidates, estimated at most %d", q, n, len(cands), k)
		}
		var got []pointID
		for _, p := range cands {
			if f.match(p) {
				got = append(got, p.id)
			}
		}
		if !slices.Equal(got, want) {
			w.t.Fatalf("filter %v: narrower %+v: got %v, want %v", q, n, got, want)
		}
	}
	// Scroll pages, with a page size that leaves a last short page or not.
	for _, limit := range []int{1, 1 + w.rng.IntN(7), len(want), len(want) + 1} {
		if limit == 0 {
			continue
		}
		var got []pointID
		var offset *pointID
		for {
			page, next := c.scroll(f, offset, limit)
			got = append(got, pointIDs(page)...)
			if next == nil {
				break
			}
			if len(page) != limit {
				w.t.Fatalf("filter %v: got a page of %d with more to come, want %d", q, len(page), limit)
			}
			offset = &next.id
		}
		if !slices.Equal(got, want) {
			w.t.Fatalf("filter %v: scroll by %d got %v, want %v", q, limit, got, want)
		}
	}
	// A scroll may start at an id no point has.
	from := pointID{num: uint64(w.rng.IntN(600))}
	page, _ := c.scroll(f, &from, len(want)+1)
	wantFrom := want[:0:0]
	for _, id := range want {
		if id.compare(from) >= 0 {
			wantFrom = append(wantFrom, id)
		}
	}
	if got := pointIDs(page); !slices.Equal(got, wantFrom) {
		w.t.Fatalf("filter %v: scroll from %s got %v, want %v", q, from, got, wantFrom)
	}
	w.checkRPCs(q, c, want)
}

// checkRPCs checks Count and Facet, answered by the service, with the scan.
func (w *planWorld) checkRPCs(q *qdrant.Filter, c *collection, want []pointID) {
	w.t.Helper()
	count, err := w.points.Count(w.t.Context(), &qdrant.CountPoints{CollectionName: "c", Filter: q, Exact: qdrant.PtrOf(true)})
	if err != nil {
		w.t.Fatalf("count: %v", err)
	}
	if got := count.GetResult().GetCount(); got != uint64(len(want)) {
		w.t.Fatalf("filter %v: count got %d, want %d", q, got, len(want))
	}
	idx := c.indexes["k"]
	wantFacet := map[indexValue]uint64{}
	for _, id := range want {
		for _, v := range idx.appendValues(nil, c.points[id]) {
			wantFacet[v]++
		}
	}
	facet, err := w.points.Facet(w.t.Context(), &qdrant.FacetCounts{CollectionName: "c", Key: "k", Filter: q, Exact: qdrant.PtrOf(true), Limit: qdrant.PtrOf(uint64(1000))})
	if err != nil {
		w.t.Fatalf("facet: %v", err)
	}
	gotFacet := map[indexValue]uint64{}
	for _, h := range facet.GetHits() {
		gotFacet[indexValue{str: h.GetValue().GetStringValue()}] = h.GetCount()
	}
	if !maps.Equal(gotFacet, wantFacet) {
		w.t.Fatalf("filter %v: facet got %v, want %v", q, gotFacet, wantFacet)
	}
}

// deleteByFilter deletes by a random filter and checks that exactly the
// points the scan found are gone.
func (w *planWorld) deleteByFilter() {
	w.t.Helper()
	q := w.filter(0)
	// A selective filter, mostly, so that the collection does not empty.
	q.Must = append(q.Must, w.match())
	f, err := newFilter(q)
	if err != nil {
		w.t.Fatalf("compile filter %v: %v", q, err)
	}
	c := w.collection()
	doomed := scan(c, f)
	before := len(c.points)
	_, err = w.points.Delete(w.t.Context(), &qdrant.DeletePoints{CollectionName: "c", Points: qdrant.NewPointsSelectorFilter(q)})
	if err != nil {
		w.t.Fatalf("delete: %v", err)
	}
	for _, id := range doomed {
		if _, ok := c.points[id]; ok {
			w.t.Fatalf("filter %v: point %s survived its delete", q, id)
		}
	}
	if got, want := len(c.points), before-len(doomed); got != want {
		w.t.Fatalf("filter %v: got %d points after delete, want %d", q, got, want)
	}
}

// checkInvariants compares the id order and every index with ones built
// from scratch out of the points.
func checkInvariants(t *testing.T, c *collection) {
	t.Helper()
	want := slices.SortedFunc(maps.Keys(c.points), pointID.compare)
	if got := slices.Collect(c.order.from(nil)); !slices.Equal(got, want) {
		t.Fatalf("id order got %d ids %v, want %d ids %v", len(got), got, len(want), want)
	}
	for i, b := range c.order.blocks {
		if len(b) == 0 || len(b) > orderBlock {
			t.Fatalf("id order block %d holds %d ids, want 1 to %d", i, len(b), orderBlock)
		}
	}
	for key, idx := range c.indexes {
		fresh := newFieldIndex(idx.path, idx.schema, idx.params)
		for _, p := range c.points {
			fresh.add(p)
		}
		if !maps.EqualFunc(idx.points, fresh.points, maps.Equal) || idx.count != fresh.count {
			t.Fatalf("index %s got %d values, %d points; want %d values, %d points, as built from scratch",
				key, len(idx.points), idx.count, len(fresh.points), fresh.count)
		}
	}
}

// FuzzPlannedFilter checks that planned filters (index and id-list
// candidates, ordered scrolls) answer exactly as a full scan does, over
// random points, writes and filters. Its seeds run with every go test; go
// test -fuzz FuzzPlannedFilter searches further.
func FuzzPlannedFilter(f *testing.F) {
	for seed := range uint64(6) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		w := newPlanWorld(t, seed)
		w.upsert(300)
		// Indexes built over stored points, then kept by writes; one is
		// created again, which replaces it.
		w.createIndex("k", qdrant.FieldType_FieldTypeKeyword)
		w.createIndex("n", qdrant.FieldType_FieldTypeInteger)
		w.upsert(300)
		w.createIndex("m.k", qdrant.FieldType_FieldTypeKeyword)
		w.createIndex("n", qdrant.FieldType_FieldTypeInteger)
		for round := range 30 {
			switch round % 3 {
			case 0:
				w.upsert(1 + w.rng.IntN(100))
			case 1:
				_, err := w.points.Delete(t.Context(), &qdrant.DeletePoints{CollectionName: "c", Points: qdrant.NewPointsSelector(w.ids(w.rng.IntN(60))...)})
				if err != nil {
					t.Fatalf("delete by ids: %v", err)
				}
			default:
				w.deleteByFilter()
			}
			checkInvariants(t, w.collection())
			for range 20 {
				w.check(w.filter(0))
			}
		}
		if w.planned == 0 || w.scanned == 0 || w.nonEmpty == 0 {
			t.Errorf("got %d planned, %d scanned and %d non-empty filters, want some of each", w.planned, w.scanned, w.nonEmpty)
		}
	})
}

// TestIDOrder checks the id order against a sorted slice through enough
// inserts and removals to split, empty and merge blocks.
func TestIDOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var o idOrder
	var want []pointID
	id := func() pointID {
		if rng.IntN(2) == 0 {
			return pointID{num: uint64(rng.IntN(4000))}
		}
		var u uuid.UUID
		u[0], u[1] = byte(rng.IntN(256)), byte(rng.IntN(16))
		return pointID{isUUID: true, uuid: u}
	}
	for step := range 40_000 {
		x := id()
		i, found := slices.BinarySearchFunc(want, x, pointID.compare)
		// Grow, then shrink to nothing, then grow again.
		if insert := step < 15_000 || step >= 30_000 || rng.IntN(10) == 0; insert {
			o.insert(x)
			if !found {
				want = slices.Insert(want, i, x)
			}
		} else {
			o.remove(x)
			if found {
				want = slices.Delete(want, i, i+1)
			}
			if len(want) > 0 && rng.IntN(2) == 0 { // remove a present id too
				j := rng.IntN(len(want))
				o.remove(want[j])
				want = slices.Delete(want, j, j+1)
			}
		}
		if step%1000 != 999 {
			continue
		}
		if got := slices.Collect(o.from(nil)); !slices.Equal(got, want) {
			t.Fatalf("step %d: got %d ids, want %d", step, len(got), len(want))
		}
		start := id()
		from, _ := slices.BinarySearchFunc(want, start, pointID.compare)
		if got := slices.Collect(o.from(&start)); !slices.Equal(got, want[from:]) {
			t.Fatalf("step %d: from %s got %d ids, want %d", step, start, len(got), len(want)-from)
		}
		for i, b := range o.blocks {
			if len(b) == 0 || len(b) > orderBlock {
				t.Fatalf("step %d: block %d holds %d ids, want 1 to %d", step, i, len(b), orderBlock)
			}
			// Merging keeps blocks from thinning out: no two neighbours
			// that would fit in one stay apart when one is below a quarter.
			if i > 0 && min(len(b), len(o.blocks[i-1])) < orderBlock/4 && len(b)+len(o.blocks[i-1]) <= orderBlock/2 {
				t.Fatalf("step %d: blocks %d and %d hold %d and %d ids, want them merged", step, i-1, i, len(o.blocks[i-1]), len(b))
			}
		}
	}
	if len(want) < 2*orderBlock {
		t.Fatalf("got %d ids at the end, want more than two blocks' worth", len(want))
	}
}

// TestPlannedDeleteKeepsBatch is the projector's withdrawal at a size where
// the planner answers it from the document_key index: the filter deletes the
// older chunks of the batch's documents and nothing else.
func TestPlannedDeleteKeepsBatch(t *testing.T) {
	s := newStore()
	cols, points := &collectionsService{store: s}, &pointsService{store: s}
	_, err := cols.Create(t.Context(), &qdrant.CreateCollection{
		CollectionName: "chunks", VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 2, Distance: qdrant.Distance_Dot}),
	})
	if err != nil {
		t.Fatalf("create collection: %v", err)
	}
	typ := qdrant.FieldType_FieldTypeKeyword
	if _, err := points.CreateFieldIndex(t.Context(), &qdrant.CreateFieldIndexCollection{CollectionName: "chunks", FieldName: "document_key", FieldType: &typ}); err != nil {
		t.Fatalf("create index: %v", err)
	}
	chunk := func(doc, version int) *qdrant.PointStruct {
		return pt(qdrant.NewIDUUID(uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%d:%d", doc, version)).String()),
			map[string]any{"document_key": fmt.Sprint("doc-", doc), "version": version})
	}
	var all []*qdrant.PointStruct
	for doc := range 5000 {
		all = append(all, chunk(doc, 1))
	}
	if _, err := points.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: "chunks", Points: all}); err != nil {
		t.Fatalf("upsert: %v", err)
	}
	// Version 2 of documents 100 to 109 replaces version 1.
	var keys []string
	var batch []*qdrant.PointStruct
	var keep []*qdrant.PointId
	for doc := 100; doc < 110; doc++ {
		keys = append(keys, fmt.Sprint("doc-", doc))
		batch = append(batch, chunk(doc, 2))
		keep = append(keep, batch[len(batch)-1].GetId())
	}
	if _, err := points.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: "chunks", Points: batch}); err != nil {
		t.Fatalf("upsert: %v", err)
	}
	q := &qdrant.Filter{
		Must:    []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)},
		MustNot: []*qdrant.Condition{qdrant.NewHasID(keep...)},
	}
	f, err := newFilter(q)
	if err != nil {
		t.Fatalf("compile filter: %v", err)
	}
	c := s.collections["chunks"]
	if _, ok := c.candidates(f); !ok {
		t.Fatal("got a full scan for the withdrawal filter, want it planned on the document_key index")
	}
	if _, err := points.Delete(t.Context(), &qdrant.DeletePoints{CollectionName: "chunks", Points: qdrant.NewPointsSelectorFilter(q)}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got, want := len(c.points), 5000; got != want {
		t.Errorf("got %d points, want %d", got, want)
	}
	for _, p := range batch {
		id, _ := parsePointID(p.GetId())
		if got := c.points[id]; got == nil || got.payload["version"].GetIntegerValue() != 2 {
			t.Errorf("got %v for %s, want version 2 kept", got, id)
		}
	}
	checkInvariants(t, c)
}
