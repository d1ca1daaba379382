package qdrantdouble

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func TestUpsertReplacesWholePoint(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	id := qdrant.NewIDUUID("230a6eea-e67e-5a55-9a06-302307f8194b")
	upsert(t, client, "chunks", &qdrant.PointStruct{Id: id, Vectors: qdrant.NewVectors(1, 2),
		Payload: qdrant.NewValueMap(map[string]any{"document_key": "doc-42", "version": 3, "text": "old"})})
	upsert(t, client, "chunks", &qdrant.PointStruct{Id: id, Vectors: qdrant.NewVectors(3, 4),
		Payload: qdrant.NewValueMap(map[string]any{"document_key": "doc-42", "version": 4})})

	got, err := client.Get(t.Context(), &qdrant.GetPoints{
		CollectionName: "chunks", Ids: []*qdrant.PointId{id},
		WithPayload: qdrant.NewWithPayload(true), WithVectors: qdrant.NewWithVectors(true),
	})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d points, want 1", len(got))
	}
	want := qdrant.NewValueMap(map[string]any{"document_key": "doc-42", "version": 4})
	if !maps.EqualFunc(got[0].GetPayload(), want, func(a, b *qdrant.Value) bool { return proto.Equal(a, b) }) {
		t.Errorf("got payload %v, want %v (replaced, not merged)", got[0].GetPayload(), want)
	}
	if v := got[0].GetVectors().GetVector().GetDenseVector().GetData(); !slices.Equal(v, []float32{3, 4}) {
		t.Errorf("got vector %v, want [3 4]", v)
	}
	if n, _ := client.Count(t.Context(), &qdrant.CountPoints{CollectionName: "chunks"}); n != 1 {
		t.Errorf("got count %d, want 1", n)
	}
}

func TestCosineVectorsAreNormalised(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Cosine)
	upsert(t, client, "chunks", &qdrant.PointStruct{Id: qdrant.NewIDNum(1), Vectors: qdrant.NewVectors(3, 4)})
	got, err := client.Get(t.Context(), &qdrant.GetPoints{
		CollectionName: "chunks", Ids: []*qdrant.PointId{qdrant.NewIDNum(1)}, WithVectors: qdrant.NewWithVectors(true),
	})
	if err != nil || len(got) != 1 {
		t.Fatalf("get: got %d points, %v, want 1, nil", len(got), err)
	}
	v := got[0].GetVectors().GetVector().GetDenseVector().GetData()
	if len(v) != 2 || math.Abs(float64(v[0])-0.6) > 1e-6 || math.Abs(float64(v[1])-0.8) > 1e-6 {
		t.Errorf("got vector %v, want [0.6 0.8]", v)
	}
}

func TestUpsertRefusals(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 4, qdrant.Distance_Cosine)
	upsert(t, client, "chunks", &qdrant.PointStruct{Id: qdrant.NewIDNum(1), Vectors: qdrant.NewVectors(1, 0, 0, 0)})

	tests := []struct {
		name   string
		points []*qdrant.PointStruct
		code   codes.Code
		msg    string
	}{
		{"short vector", []*qdrant.PointStruct{{Id: qdrant.NewIDNum(2), Vectors: qdrant.NewVectors(1, 0, 0)}},
			codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: 4, got 3"},
		{"bad point after good one", []*qdrant.PointStruct{
			{Id: qdrant.NewIDNum(3), Vectors: qdrant.NewVectors(1, 0, 0, 0)},
			{Id: qdrant.NewIDNum(4), Vectors: qdrant.NewVectors(1, 0, 0, 0, 0)},
		}, codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: 4, got 5"},
		{"bad uuid", []*qdrant.PointStruct{{Id: qdrant.NewIDUUID("doc-42:1:0"), Vectors: qdrant.NewVectors(1, 0, 0, 0)}},
			codes.InvalidArgument, "Unable to parse UUID: doc-42:1:0"},
		{"no id", []*qdrant.PointStruct{{Vectors: qdrant.NewVectors(1, 0, 0, 0)}},
			codes.InvalidArgument, "Empty ID is not allowed"},
		{"no vector", []*qdrant.PointStruct{{Id: qdrant.NewIDNum(5)}}, codes.InvalidArgument, ""},
		{"sparse vector", []*qdrant.PointStruct{{Id: qdrant.NewIDNum(6), Vectors: qdrant.NewVectorsSparse([]uint32{1}, []float32{1})}},
			codes.Unimplemented, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: "chunks", Points: tt.points})
			wantStatus(t, err, tt.code, tt.msg)
			// A refused batch writes nothing.
			if ids := scrollAll(t, client, "chunks", nil); !slices.Equal(ids, []string{"1"}) {
				t.Errorf("got points %v after a refused upsert, want [1]", ids)
			}
		})
	}
}

func TestDeletePoints(t *testing.T) {
	tests := []struct {
		name     string
		selector *qdrant.PointsSelector
		want     []string
	}{
		{"by ids, unknown ignored", qdrant.NewPointsSelector(qdrant.NewIDNum(1), qdrant.NewIDNum(3), qdrant.NewIDNum(99)), []string{"2", "4"}},
		{"by filter", qdrant.NewPointsSelectorFilter(&qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatch("document_key", "a")}}), []string{"3", "4"}},
		{"by empty filter deletes all", qdrant.NewPointsSelectorFilter(&qdrant.Filter{}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := startDouble(t, Options{}, "")
			newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
			upsert(t, client, "chunks",
				pt(qdrant.NewIDNum(1), map[string]any{"document_key": "a"}),
				pt(qdrant.NewIDNum(2), map[string]any{"document_key": "a"}),
				pt(qdrant.NewIDNum(3), map[string]any{"document_key": "b"}),
				pt(qdrant.NewIDNum(4), map[string]any{"document_key": "c"}),
			)
			res, err := client.Delete(t.Context(), &qdrant.DeletePoints{CollectionName: "chunks", Wait: qdrant.PtrOf(true), Points: tt.selector})
			if err != nil {
				t.Fatalf("delete: %v", err)
			}
			if res.GetStatus() != qdrant.UpdateStatus_Completed {
				t.Errorf("got status %s, want Completed", res.GetStatus())
			}
			if got := scrollAll(t, client, "chunks", nil); !slices.Equal(got, tt.want) {
				t.Errorf("got remaining %v, want %v", got, tt.want)
			}
		})
	}
}

// The projector withdraws the older versions of a document by deleting every
// point of the document except the current version's chunks.
func TestDeleteOtherChunksOfDocument(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Cosine)
	chunk := func(doc string, version, ordinal int) *qdrant.PointStruct {
		id := uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s:%d:%d", doc, version, ordinal))
		return pt(qdrant.NewIDUUID(id.String()), map[string]any{"document_key": doc, "version": version, "ordinal": ordinal})
	}
	a1 := []*qdrant.PointStruct{chunk("a", 1, 0), chunk("a", 1, 1), chunk("a", 1, 2)}
	a2 := []*qdrant.PointStruct{chunk("a", 2, 0), chunk("a", 2, 1)}
	b1 := []*qdrant.PointStruct{chunk("b", 1, 0), chunk("b", 1, 1)}
	upsert(t, client, "chunks", slices.Concat(a1, a2, b1)...)

	keep := make([]*qdrant.PointId, len(a2))
	for i, p := range a2 {
		keep[i] = p.GetId()
	}
	_, err := client.Delete(t.Context(), &qdrant.DeletePoints{
		CollectionName: "chunks", Wait: qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelectorFilter(&qdrant.Filter{
			Must:    []*qdrant.Condition{qdrant.NewMatch("document_key", "a")},
			MustNot: []*qdrant.Condition{qdrant.NewHasID(keep...)},
		}),
	})
	if err != nil {
		t.Fatalf("delete: %v", err)
	}

	var want []string
	for _, p := range slices.Concat(a2, b1) {
		want = append(want, idString(p.GetId()))
	}
	if got := scrollAll(t, client, "chunks", nil); !sameIDs(got, want) {
		t.Errorf("got remaining %v, want %v", got, want)
	}
}

func TestScrollPagination(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)

	var points []*qdrant.PointStruct
	var numeric, uuids []string
	for i := range 23 {
		n := uint64(i*7 + 1) // gaps between ids
		points = append(points, pt(qdrant.NewIDNum(n), map[string]any{"even": n%2 == 0}))
		numeric = append(numeric, fmt.Sprint(n))
	}
	for i := range 12 {
		id := uuid.NewSHA1(uuid.NameSpaceURL, fmt.Append(nil, i))
		points = append(points, pt(qdrant.NewIDUUID(id.String()), map[string]any{"even": i%2 == 0}))
		uuids = append(uuids, id.String())
	}
	rand.Shuffle(len(points), func(i, j int) { points[i], points[j] = points[j], points[i] })
	upsert(t, client, "chunks", points...)
	slices.Sort(uuids) // canonical lower-case hex sorts as the bytes do
	want := slices.Concat(numeric, uuids)

	for _, limit := range []uint32{0, 1, 3, 10, 34, 35, 36, 100} { // 0: the default, 10
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			var got []string
			var offset *qdrant.PointId
			pages, perPage := 0, limit
			if limit == 0 {
				perPage = defaultScrollLimit
			}
			for {
				req := &qdrant.ScrollPoints{CollectionName: "chunks", Offset: offset}
				if limit != 0 {
					req.Limit = qdrant.PtrOf(limit)
				}
				page, next, err := client.ScrollAndOffset(t.Context(), req)
				if err != nil {
					t.Fatalf("scroll: %v", err)
				}
				pages++
				got = append(got, idStrings(page)...)
				if next == nil {
					break
				}
				if len(page) != int(perPage) {
					t.Fatalf("got a page of %d with more to come, want %d", len(page), perPage)
				}
				if idString(next) != want[len(got)] {
					t.Fatalf("got next_page_offset %s, want %s", idString(next), want[len(got)])
				}
				offset = next
			}
			if !slices.Equal(got, want) {
				t.Errorf("got ids %v, want %v", got, want)
			}
			if wantPages := (len(want) + int(perPage) - 1) / int(perPage); pages != wantPages {
				t.Errorf("got %d pages, want %d", pages, wantPages)
			}
		})
	}

	t.Run("offset between ids", func(t *testing.T) {
		page, _, err := client.ScrollAndOffset(t.Context(), &qdrant.ScrollPoints{
			CollectionName: "chunks", Offset: qdrant.NewIDNum(9), Limit: qdrant.PtrOf(uint32(2)),
		})
		if err != nil {
			t.Fatalf("scroll: %v", err)
		}
		if got := idStrings(page); !slices.Equal(got, []string{"15", "22"}) {
			t.Errorf("got %v, want [15 22]", got)
		}
	})
	t.Run("filtered", func(t *testing.T) {
		var wantEven []string
		for _, p := range points {
			if p.GetPayload()["even"].GetBoolValue() {
				wantEven = append(wantEven, idString(p.GetId()))
			}
		}
		got := scrollAll(t, client, "chunks", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchBool("even", true)}})
		if !sameIDs(got, wantEven) || !slices.IsSortedFunc(got, func(a, b string) int {
			return slices.Index(want, a) - slices.Index(want, b)
		}) {
			t.Errorf("got %v, want %v in id order", got, wantEven)
		}
	})
	t.Run("zero limit", func(t *testing.T) {
		_, err := client.Scroll(t.Context(), &qdrant.ScrollPoints{CollectionName: "chunks", Limit: qdrant.PtrOf(uint32(0))})
		wantStatus(t, err, codes.InvalidArgument, "")
	})
}

func TestPayloadSelectors(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	upsert(t, client, "chunks", pt(qdrant.NewIDNum(1), map[string]any{"document_key": "a", "version": 2, "text": "hello"}))

	tests := []struct {
		name     string
		selector *qdrant.WithPayloadSelector
		scroll   []string // payload keys Scroll returns
		get      []string // payload keys Get returns
	}{
		{"default", nil, []string{"document_key", "text", "version"}, nil},
		{"enabled", qdrant.NewWithPayload(true), []string{"document_key", "text", "version"}, []string{"document_key", "text", "version"}},
		{"disabled", qdrant.NewWithPayload(false), nil, nil},
		{"include", qdrant.NewWithPayloadInclude("document_key", "version", "missing"), []string{"document_key", "version"}, []string{"document_key", "version"}},
		{"exclude", qdrant.NewWithPayloadExclude("text"), []string{"document_key", "version"}, []string{"document_key", "version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scrolled, err := client.Scroll(t.Context(), &qdrant.ScrollPoints{CollectionName: "chunks", WithPayload: tt.selector})
			if err != nil || len(scrolled) != 1 {
				t.Fatalf("scroll: got %d points, %v, want 1, nil", len(scrolled), err)
			}
			if got := slices.Sorted(maps.Keys(scrolled[0].GetPayload())); !slices.Equal(got, tt.scroll) {
				t.Errorf("scroll: got keys %v, want %v", got, tt.scroll)
			}
			got, err := client.Get(t.Context(), &qdrant.GetPoints{CollectionName: "chunks", Ids: []*qdrant.PointId{qdrant.NewIDNum(1)}, WithPayload: tt.selector})
			if err != nil || len(got) != 1 {
				t.Fatalf("get: got %d points, %v, want 1, nil", len(got), err)
			}
			if keys := slices.Sorted(maps.Keys(got[0].GetPayload())); !slices.Equal(keys, tt.get) {
				t.Errorf("get: got keys %v, want %v", keys, tt.get)
			}
		})
	}
}

func TestGetByIDs(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	u := "6f9619ff-8b86-d011-b42d-00c04fc964ff"
	upsert(t, client, "chunks", pt(qdrant.NewIDNum(1), nil), pt(qdrant.NewIDNum(2), nil), pt(qdrant.NewIDUUID(u), nil))

	tests := []struct {
		name string
		ids  []*qdrant.PointId
		want []string
	}{
		{"request order", []*qdrant.PointId{qdrant.NewIDUUID(u), qdrant.NewIDNum(2)}, []string{u, "2"}},
		{"unknown left out", []*qdrant.PointId{qdrant.NewIDNum(7), qdrant.NewIDNum(1)}, []string{"1"}},
		{"duplicates once", []*qdrant.PointId{qdrant.NewIDNum(1), qdrant.NewIDNum(1)}, []string{"1"}},
		{"uuid in another spelling", []*qdrant.PointId{qdrant.NewIDUUID("6F9619FF8B86D011B42D00C04FC964FF")}, []string{u}},
		{"none", nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Get(t.Context(), &qdrant.GetPoints{CollectionName: "chunks", Ids: tt.ids})
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if ids := idStrings(got); !slices.Equal(ids, tt.want) {
				t.Errorf("got %v, want %v", ids, tt.want)
			}
			for _, p := range got {
				if p.GetVectors() != nil {
					t.Errorf("got a vector on %s without with_vectors, want none", idString(p.GetId()))
				}
			}
		})
	}
}

func TestFacet(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	var points []*qdrant.PointStruct
	for i, doc := range []string{"a", "c", "b", "a", "d", "c", "b", "a"} {
		points = append(points, pt(qdrant.NewIDNum(uint64(i)), map[string]any{
			"document_key": doc, "version": i % 3, "tags": []any{"x", "x", 7}, "unindexed": "u",
		}))
	}
	upsert(t, client, "chunks", points...)
	createIndex := func(field string, typ qdrant.FieldType, params *qdrant.PayloadIndexParams) {
		_, err := client.CreateFieldIndex(t.Context(), &qdrant.CreateFieldIndexCollection{
			CollectionName: "chunks", FieldName: field, FieldType: &typ, FieldIndexParams: params,
		})
		if err != nil {
			t.Fatalf("create index %s: %v", field, err)
		}
	}
	createIndex("document_key", qdrant.FieldType_FieldTypeKeyword, nil)
	createIndex("version", qdrant.FieldType_FieldTypeInteger, nil)
	createIndex("tags", qdrant.FieldType_FieldTypeKeyword, nil)
	createIndex("no_lookup", qdrant.FieldType_FieldTypeInteger, qdrant.NewPayloadIndexParamsInt(&qdrant.IntegerIndexParams{Lookup: qdrant.PtrOf(false)}))

	type hit struct {
		value string
		count uint64
	}
	tests := []struct {
		name string
		req  *qdrant.FacetCounts
		want []hit
	}{
		{"count then value", &qdrant.FacetCounts{Key: "document_key"}, []hit{{"a", 3}, {"b", 2}, {"c", 2}, {"d", 1}}},
		{"limit", &qdrant.FacetCounts{Key: "document_key", Limit: qdrant.PtrOf(uint64(2))}, []hit{{"a", 3}, {"b", 2}}},
		{"filter", &qdrant.FacetCounts{Key: "document_key", Exact: qdrant.PtrOf(true),
			Filter: &qdrant.Filter{MustNot: []*qdrant.Condition{qdrant.NewMatch("document_key", "a")}}}, []hit{{"b", 2}, {"c", 2}, {"d", 1}}},
		{"integer", &qdrant.FacetCounts{Key: "version"}, []hit{{"0", 3}, {"1", 3}, {"2", 2}}},
		{"array counts a point once, only indexed type", &qdrant.FacetCounts{Key: "tags"}, []hit{{"x", 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.CollectionName = "chunks"
			hits, err := client.Facet(t.Context(), tt.req)
			if err != nil {
				t.Fatalf("facet: %v", err)
			}
			got := make([]hit, len(hits))
			for i, h := range hits {
				v := h.GetValue().GetStringValue()
				if _, ok := h.GetValue().GetVariant().(*qdrant.FacetValue_IntegerValue); ok {
					v = fmt.Sprint(h.GetValue().GetIntegerValue())
				}
				got[i] = hit{v, h.GetCount()}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}

	for _, key := range []string{"unindexed", "no_lookup"} {
		t.Run("no facet index on "+key, func(t *testing.T) {
			_, err := client.Facet(t.Context(), &qdrant.FacetCounts{CollectionName: "chunks", Key: key})
			wantStatus(t, err, codes.InvalidArgument, "Wrong input: No appropriate index for faceting: `"+key+"`. Please create one to facet on this field. Check https://qdrant.tech/documentation/concepts/indexing/#payload-index to see which payload schemas support Match conditions")
		})
	}
}

// The double is shared by concurrent callers; run with -race.
func TestConcurrentCalls(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := uint64(w*perWorker + i)
				if _, err := client.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: "chunks",
					Points: []*qdrant.PointStruct{pt(qdrant.NewIDNum(id), map[string]any{"w": w})}}); err != nil {
					errs <- err
					return
				}
				if _, err := client.Scroll(t.Context(), &qdrant.ScrollPoints{CollectionName: "chunks"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent call: %v", err)
	}
	if n, err := client.Count(t.Context(), &qdrant.CountPoints{CollectionName: "chunks"}); err != nil || n != workers*perWorker {
		t.Errorf("got count %d, %v, want %d, nil", n, err, workers*perWorker)
	}
}

func TestUnimplementedRPC(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	_, err := client.Query(t.Context(), &qdrant.QueryPoints{CollectionName: "chunks", Query: qdrant.NewQuery(1, 0)})
	wantStatus(t, err, codes.Unimplemented, "")
}
