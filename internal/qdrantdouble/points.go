package qdrantdouble

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"
)

// Defaults Qdrant applies when a request leaves them out.
const (
	defaultScrollLimit = 10
	defaultFacetLimit  = 10
)

// pointsService answers the Points service from a store.
//
// Options that only matter on a cluster (read consistency, write ordering) or
// bound the time of a call (timeout) are accepted and ignored: on one
// in-memory node every read is consistent and every call immediate. Counts and
// facets are always exact, which is what Qdrant's exact: true returns.
type pointsService struct {
	qdrant.UnimplementedPointsServer
	store *store
}

// CreateFieldIndex builds a keyword or integer payload index over the points
// stored, which every write then keeps up to date. Creating it again replaces
// it, as in Qdrant.
func (s *pointsService) CreateFieldIndex(_ context.Context, req *qdrant.CreateFieldIndexCollection) (*qdrant.PointsOperationResponse, error) {
	start := time.Now()
	path, err := parsePath(req.GetFieldName())
	if err != nil {
		return nil, err
	}
	schema, err := indexSchema(req.FieldType, req.GetFieldIndexParams())
	if err != nil {
		return nil, err
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.createIndex(req.GetFieldName(), newFieldIndex(path, schema, proto.CloneOf(req.GetFieldIndexParams())))
	return c.completeWrite(req.Wait, start), nil
}

// indexSchema maps an index request to the payload_schema type it shows as.
func indexSchema(ft *qdrant.FieldType, params *qdrant.PayloadIndexParams) (qdrant.PayloadSchemaType, error) {
	if ft == nil {
		return 0, errUnsupported("inferring the index type from stored values; set field_type")
	}
	switch *ft {
	case qdrant.FieldType_FieldTypeKeyword:
		if params != nil && params.GetKeywordIndexParams() == nil {
			return 0, errInvalid("field_index_params do not match field_type %s", *ft)
		}
		return qdrant.PayloadSchemaType_Keyword, nil
	case qdrant.FieldType_FieldTypeInteger:
		if params != nil && params.GetIntegerIndexParams() == nil {
			return 0, errInvalid("field_index_params do not match field_type %s", *ft)
		}
		return qdrant.PayloadSchemaType_Integer, nil
	default:
		return 0, errUnsupported("%s indexes", *ft)
	}
}

// Upsert inserts or overwrites whole points: an existing point's vector and
// payload are replaced, not merged. The batch is validated before anything is
// written, so a bad point leaves the collection unchanged.
func (s *pointsService) Upsert(_ context.Context, req *qdrant.UpsertPoints) (*qdrant.PointsOperationResponse, error) {
	start := time.Now()
	switch {
	case req.ShardKeySelector != nil:
		return nil, errUnsupported("shard key selectors")
	case req.UpdateFilter != nil:
		return nil, errUnsupported("conditional upserts (update_filter)")
	case req.GetUpdateMode() != qdrant.UpdateMode_Upsert:
		return nil, errUnsupported("update_mode %s", req.GetUpdateMode())
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	points := make([]*point, 0, len(req.GetPoints()))
	for _, ps := range req.GetPoints() {
		p, err := c.newPoint(ps)
		if err != nil {
			return nil, err
		}
		points = append(points, p)
	}
	for _, p := range points { // in order: the last of duplicate ids wins, as in Qdrant
		c.put(p)
	}
	return c.completeWrite(req.Wait, start), nil
}

// newPoint validates a request point against the collection and returns the
// copy to store.
func (c *collection) newPoint(ps *qdrant.PointStruct) (*point, error) {
	if ps.GetId() == nil {
		return nil, errInvalid("Empty ID is not allowed")
	}
	id, err := parsePointID(ps.GetId())
	if err != nil {
		return nil, err
	}
	vec, err := denseVector(ps.GetVectors())
	if err != nil {
		return nil, err
	}
	if vec == nil {
		return nil, errInvalid("point %s has no vector; the collection's unnamed vector is required", id)
	}
	if want := int(c.vectors.GetSize()); len(vec) != want {
		return nil, errVectorDimension(want, len(vec))
	}
	return &point{id: id, vector: storeVector(vec, c.vectors.GetDistance()), payload: clonePayload(ps.GetPayload())}, nil
}

// denseVector extracts the unnamed dense vector of a point, nil if it has none.
// It accepts both the current encoding (Vector.dense) and the deprecated flat
// one (Vector.data without indices or vectors_count) that older clients send.
func denseVector(v *qdrant.Vectors) ([]float32, error) {
	switch o := v.GetVectorsOptions().(type) {
	case nil:
		return nil, nil
	case *qdrant.Vectors_Vectors:
		return nil, errUnsupported("named vectors")
	case *qdrant.Vectors_Vector:
		vec := o.Vector
		switch d := vec.GetVector().(type) {
		case *qdrant.Vector_Dense:
			return d.Dense.GetData(), nil
		case nil:
			if vec.GetIndices() != nil || vec.VectorsCount != nil {
				return nil, errUnsupported("sparse vectors and multivectors")
			}
			return vec.GetData(), nil
		default:
			return nil, errUnsupported("non-dense vectors (sparse, multi or inference inputs)")
		}
	default:
		return nil, errUnsupported("vector encoding %T", o)
	}
}

// Delete removes points by id (unknown ids are ignored) or by filter.
func (s *pointsService) Delete(_ context.Context, req *qdrant.DeletePoints) (*qdrant.PointsOperationResponse, error) {
	start := time.Now()
	if req.ShardKeySelector != nil {
		return nil, errUnsupported("shard key selectors")
	}
	var ids []pointID
	var f *filter
	switch sel := req.GetPoints().GetPointsSelectorOneOf().(type) {
	case *qdrant.PointsSelector_Points:
		var err error
		if ids, err = parsePointIDs(sel.Points.GetIds()); err != nil {
			return nil, err
		}
	case *qdrant.PointsSelector_Filter:
		var err error
		if f, err = newFilter(sel.Filter); err != nil {
			return nil, err
		}
	default:
		return nil, errInvalid("points selector has neither ids nor a filter")
	}
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		c.remove(id)
	}
	if f != nil {
		for _, p := range slices.Collect(c.matching(f)) {
			c.remove(p.id)
		}
	}
	return c.completeWrite(req.Wait, start), nil
}

// Get retrieves points by id, in the order asked, each once; unknown ids are
// left out. Without with_payload Qdrant's Get returns no payload.
func (s *pointsService) Get(_ context.Context, req *qdrant.GetPoints) (*qdrant.GetResponse, error) {
	start := time.Now()
	if req.ShardKeySelector != nil {
		return nil, errUnsupported("shard key selectors")
	}
	ids, err := parsePointIDs(req.GetIds())
	if err != nil {
		return nil, err
	}
	view, err := compilePayloadSelector(req.GetWithPayload(), false)
	if err != nil {
		return nil, err
	}
	withVector, err := vectorSelector(req.GetWithVectors())
	if err != nil {
		return nil, err
	}
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	seen := make(map[pointID]bool, len(ids))
	out := make([]*qdrant.RetrievedPoint, 0, len(ids))
	for _, id := range ids {
		p, ok := c.points[id]
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, p.retrieved(view, withVector))
	}
	return &qdrant.GetResponse{Result: out, Time: time.Since(start).Seconds()}, nil
}

// Count counts the points that pass the filter, exactly.
func (s *pointsService) Count(_ context.Context, req *qdrant.CountPoints) (*qdrant.CountResponse, error) {
	start := time.Now()
	if req.ShardKeySelector != nil {
		return nil, errUnsupported("shard key selectors")
	}
	f, err := newFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := uint64(0)
	for range c.matching(f) {
		n++
	}
	return &qdrant.CountResponse{Result: &qdrant.CountResult{Count: n}, Time: time.Since(start).Seconds()}, nil
}

// Scroll pages through the points that pass the filter in id order (numeric
// ids first, then UUIDs). A page starts at the first point whose id is at or
// after offset and holds up to limit points (default 10); next_page_offset is
// the id of the point after the page, absent on the last page. Without
// with_payload Qdrant's Scroll returns the whole payload.
func (s *pointsService) Scroll(_ context.Context, req *qdrant.ScrollPoints) (*qdrant.ScrollResponse, error) {
	start := time.Now()
	switch {
	case req.ShardKeySelector != nil:
		return nil, errUnsupported("shard key selectors")
	case req.OrderBy != nil:
		return nil, errUnsupported("scrolling ordered by a payload key (order_by)")
	}
	limit := uint32(defaultScrollLimit)
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit == 0 {
		return nil, errInvalid("Validation error in body: [limit: value 0 invalid, must be 1 or larger]")
	}
	var offset *pointID
	if req.Offset != nil {
		id, err := parsePointID(req.Offset)
		if err != nil {
			return nil, err
		}
		offset = &id
	}
	f, err := newFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	view, err := compilePayloadSelector(req.GetWithPayload(), true)
	if err != nil {
		return nil, err
	}
	withVector, err := vectorSelector(req.GetWithVectors())
	if err != nil {
		return nil, err
	}
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	page, next := c.scroll(f, offset, int(limit))
	resp := &qdrant.ScrollResponse{}
	if next != nil {
		resp.NextPageOffset = next.id.proto()
	}
	resp.Result = make([]*qdrant.RetrievedPoint, len(page))
	for i, p := range page {
		resp.Result[i] = p.retrieved(view, withVector)
	}
	resp.Time = time.Since(start).Seconds()
	return resp, nil
}

// Facet counts, for each value of an indexed keyword or integer key, the
// points that pass the filter and hold that value; a point holding a value
// twice counts once. Hits are ordered by count, highest first, then by value,
// and cut to limit (default 10). Like Qdrant, it refuses a key without a
// keyword or integer (lookup) index.
func (s *pointsService) Facet(_ context.Context, req *qdrant.FacetCounts) (*qdrant.FacetResponse, error) {
	start := time.Now()
	if req.ShardKeySelector != nil {
		return nil, errUnsupported("shard key selectors")
	}
	limit := uint64(defaultFacetLimit)
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit == 0 {
		return nil, errInvalid("Validation error in body: [limit: value 0 invalid, must be 1 or larger]")
	}
	f, err := newFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	c, err := s.store.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	idx, ok := c.indexes[req.GetKey()]
	if !ok || !idx.facetable() {
		return nil, errNoFacetIndex(req.GetKey())
	}
	counts := make(map[indexValue]uint64)
	var vals []indexValue
	for p := range c.matching(f) {
		vals = idx.appendValues(vals[:0], p)
		for _, v := range vals {
			counts[v]++
		}
	}
	hits := make([]*qdrant.FacetHit, 0, len(counts))
	for fv, n := range counts {
		hit := &qdrant.FacetHit{Count: n, Value: &qdrant.FacetValue{Variant: &qdrant.FacetValue_StringValue{StringValue: fv.str}}}
		if fv.isInt {
			hit.Value = &qdrant.FacetValue{Variant: &qdrant.FacetValue_IntegerValue{IntegerValue: fv.num}}
		}
		hits = append(hits, hit)
	}
	slices.SortFunc(hits, func(a, b *qdrant.FacetHit) int {
		if c := cmp.Compare(b.GetCount(), a.GetCount()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.GetValue().GetIntegerValue(), b.GetValue().GetIntegerValue()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetValue().GetStringValue(), b.GetValue().GetStringValue())
	})
	if uint64(len(hits)) > limit {
		hits = hits[:limit]
	}
	return &qdrant.FacetResponse{Hits: hits, Time: time.Since(start).Seconds()}, nil
}

// vectorSelector reports whether points come back with their vector. Qdrant's
// default is without.
func vectorSelector(sel *qdrant.WithVectorsSelector) (bool, error) {
	switch s := sel.GetSelectorOptions().(type) {
	case nil:
		return false, nil
	case *qdrant.WithVectorsSelector_Enable:
		return s.Enable, nil
	default:
		return false, errUnsupported("selecting vectors by name")
	}
}

// retrieved renders a stored point as a response point.
func (p *point) retrieved(view payloadView, withVector bool) *qdrant.RetrievedPoint {
	rp := &qdrant.RetrievedPoint{Id: p.id.proto(), Payload: view(p.payload)}
	if withVector {
		rp.Vectors = &qdrant.VectorsOutput{VectorsOptions: &qdrant.VectorsOutput_Vector{
			Vector: &qdrant.VectorOutput{Vector: &qdrant.VectorOutput_Dense{Dense: &qdrant.DenseVector{Data: slices.Clone(p.vector)}}},
		}}
	}
	return rp
}
