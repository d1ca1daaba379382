package qdrantdouble

import (
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
)

// filterFixture stores the points the filter tests count. The comments name
// the Qdrant rule each odd value exercises.
func filterFixture(t *testing.T) *qdrant.Client {
	t.Helper()
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Dot)
	upsert(t, client, "chunks",
		pt(qdrant.NewIDNum(1), map[string]any{"document_key": "a", "version": 1, "tags": []any{"x", "y"}, "score": 0.5, "gone": nil}),
		pt(qdrant.NewIDNum(2), map[string]any{"document_key": "a", "version": 2, "tags": []any{}, "score": 1.5}),
		pt(qdrant.NewIDNum(3), map[string]any{"document_key": "b", "version": 1, "tags": "x", "score": 2}),
		pt(qdrant.NewIDNum(4), map[string]any{"document_key": "c", "version": 3, "meta": map[string]any{"lang": "en"}}),
		// A double 2.0 is not the integer 2; an integer key is not a keyword.
		pt(qdrant.NewIDNum(5), map[string]any{"document_key": 7, "version": 2.0}),
	)
	return client
}

func TestCountWithFilter(t *testing.T) {
	client := filterFixture(t)
	key := func(k string) *qdrant.Condition { return qdrant.NewMatch("document_key", k) }
	tests := []struct {
		name   string
		filter *qdrant.Filter
		want   uint64
	}{
		{"no filter", nil, 5},
		{"empty filter", &qdrant.Filter{}, 5},
		{"must", &qdrant.Filter{Must: []*qdrant.Condition{key("a")}}, 2},
		{"must is all of", &qdrant.Filter{Must: []*qdrant.Condition{key("a"), qdrant.NewMatchInt("version", 2)}}, 1},
		{"must_not", &qdrant.Filter{MustNot: []*qdrant.Condition{key("a")}}, 3},
		{"should is any of", &qdrant.Filter{Should: []*qdrant.Condition{key("b"), key("c")}}, 2},
		{"should with must", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchInt("version", 1)}, Should: []*qdrant.Condition{key("b"), key("c")}}, 1},
		{"has_id, unknown ignored", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewHasID(qdrant.NewIDNum(1), qdrant.NewIDNum(3), qdrant.NewIDNum(99))}}, 2},
		{"must and must_not has_id", &qdrant.Filter{Must: []*qdrant.Condition{key("a")}, MustNot: []*qdrant.Condition{qdrant.NewHasID(qdrant.NewIDNum(1))}}, 1},
		{"range gte counts doubles", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewRange("version", &qdrant.Range{Gte: qdrant.PtrOf(2.0)})}}, 3},
		{"range gt and lt", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewRange("score", &qdrant.Range{Gt: qdrant.PtrOf(0.5), Lt: qdrant.PtrOf(2.0)})}}, 1},
		{"range lte", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewRange("score", &qdrant.Range{Lte: qdrant.PtrOf(2.0)})}}, 3},
		{"match keywords any", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", "a", "c")}}, 3},
		{"match integers any skips doubles", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchInts("version", 2, 3)}}, 2},
		{"match integer skips doubles", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchInt("version", 2)}}, 1},
		{"match keyword on array element", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatch("tags", "x")}}, 2},
		// Qdrant's except matches any value that is not a listed string,
		// numbers included; a missing key never matches.
		{"except keywords", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchExceptKeywords("document_key", "a")}}, 3},
		{"except integers", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchExceptInts("version", 1)}}, 3},
		{"except on array needs one other element", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchExceptKeywords("tags", "x")}}, 1},
		{"is_empty: missing, null or []", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewIsEmpty("tags")}}, 3},
		{"is_null: present and null", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewIsNull("gone")}}, 1},
		{"field is_empty false", &qdrant.Filter{Must: []*qdrant.Condition{{ConditionOneOf: &qdrant.Condition_Field{
			Field: &qdrant.FieldCondition{Key: "tags", IsEmpty: qdrant.PtrOf(false)}}}}}, 2},
		{"nested key path", &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatch("meta.lang", "en")}}, 1},
		{"filter as condition", &qdrant.Filter{Must: []*qdrant.Condition{
			qdrant.NewFilterAsCondition(&qdrant.Filter{Should: []*qdrant.Condition{key("b"), key("c")}}),
			qdrant.NewFilterAsCondition(&qdrant.Filter{MustNot: []*qdrant.Condition{key("c")}}),
		}}, 1},
		{"min_should", &qdrant.Filter{MinShould: &qdrant.MinShould{MinCount: 2, Conditions: []*qdrant.Condition{
			key("a"), qdrant.NewMatchInt("version", 1), qdrant.NewMatch("tags", "x"),
		}}}, 2},
		{"min_should zero", &qdrant.Filter{MinShould: &qdrant.MinShould{Conditions: []*qdrant.Condition{key("zzz")}}}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.Count(t.Context(), &qdrant.CountPoints{CollectionName: "chunks", Filter: tt.filter, Exact: qdrant.PtrOf(true)})
			if err != nil {
				t.Fatalf("count: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// A filter the double cannot evaluate as Qdrant does is refused, never
// evaluated as something else.
func TestFilterRefusals(t *testing.T) {
	client := filterFixture(t)
	field := func(fc *qdrant.FieldCondition) *qdrant.Condition {
		return &qdrant.Condition{ConditionOneOf: &qdrant.Condition_Field{Field: fc}}
	}
	tests := []struct {
		name string
		cond *qdrant.Condition
		code codes.Code
	}{
		{"empty condition", &qdrant.Condition{}, codes.InvalidArgument},
		{"field condition without clause", field(&qdrant.FieldCondition{Key: "document_key"}), codes.InvalidArgument},
		{"match without value", field(&qdrant.FieldCondition{Key: "document_key", Match: &qdrant.Match{}}), codes.InvalidArgument},
		{"bad has_id", qdrant.NewHasID(qdrant.NewIDUUID("not-a-uuid")), codes.InvalidArgument},
		{"full text", qdrant.NewMatchText("document_key", "a"), codes.Unimplemented},
		{"geo", qdrant.NewGeoRadius("location", 1, 2, 3), codes.Unimplemented},
		{"values count", qdrant.NewValuesCount("tags", &qdrant.ValuesCount{Gt: qdrant.PtrOf(uint64(1))}), codes.Unimplemented},
		{"nested objects", qdrant.NewNestedFilter("meta", &qdrant.Filter{}), codes.Unimplemented},
		{"has vector", qdrant.NewHasVector(""), codes.Unimplemented},
		{"array path", qdrant.NewMatch("meta[].lang", "en"), codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Count(t.Context(), &qdrant.CountPoints{CollectionName: "chunks",
				Filter: &qdrant.Filter{Should: []*qdrant.Condition{tt.cond}}})
			wantStatus(t, err, tt.code, "")
		})
	}
}
