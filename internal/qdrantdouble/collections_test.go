package qdrantdouble

import (
	"slices"
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
)

func TestHealthCheck(t *testing.T) {
	client := startDouble(t, Options{}, "")
	reply, err := client.HealthCheck(t.Context())
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	if reply.GetVersion() != Version {
		t.Errorf("got version %q, want %q", reply.GetVersion(), Version)
	}
}

func TestCollectionLifecycle(t *testing.T) {
	client := startDouble(t, Options{}, "")
	ctx := t.Context()

	exists, err := client.CollectionExists(ctx, "chunks")
	if err != nil || exists {
		t.Fatalf("exists before create: got %v, %v, want false, nil", exists, err)
	}
	newCollection(t, client, "chunks", 4, qdrant.Distance_Cosine)
	newCollection(t, client, "another", 2, qdrant.Distance_Dot)

	exists, err = client.CollectionExists(ctx, "chunks")
	if err != nil || !exists {
		t.Fatalf("exists after create: got %v, %v, want true, nil", exists, err)
	}

	err = client.CreateCollection(ctx, &qdrant.CreateCollection{
		CollectionName: "chunks",
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine}),
	})
	wantStatus(t, err, codes.AlreadyExists, "Wrong input: Collection `chunks` already exists!")

	upsert(t, client, "chunks", &qdrant.PointStruct{Id: qdrant.NewIDNum(1), Vectors: qdrant.NewVectors(1, 0, 0, 0)})
	info, err := client.GetCollectionInfo(ctx, "chunks")
	if err != nil {
		t.Fatalf("get info: %v", err)
	}
	if info.GetStatus() != qdrant.CollectionStatus_Green {
		t.Errorf("got status %s, want Green", info.GetStatus())
	}
	if info.GetPointsCount() != 1 {
		t.Errorf("got points_count %d, want 1", info.GetPointsCount())
	}
	params := info.GetConfig().GetParams().GetVectorsConfig().GetParams()
	if params.GetSize() != 4 || params.GetDistance() != qdrant.Distance_Cosine {
		t.Errorf("got vectors %d/%s, want 4/Cosine", params.GetSize(), params.GetDistance())
	}

	names, err := client.ListCollections(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !slices.Equal(names, []string{"another", "chunks"}) {
		t.Errorf("got collections %v, want [another chunks]", names)
	}

	if err := client.DeleteCollection(ctx, "chunks"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if exists, _ := client.CollectionExists(ctx, "chunks"); exists {
		t.Errorf("got exists true after delete, want false")
	}
	// Qdrant answers result=false, not an error, for a missing collection.
	resp, err := client.GetCollectionsClient().Delete(ctx, &qdrant.DeleteCollection{CollectionName: "chunks"})
	if err != nil || resp.GetResult() {
		t.Errorf("delete missing: got %v, %v, want false, nil", resp.GetResult(), err)
	}
}

func TestCreateCollectionRefusals(t *testing.T) {
	client := startDouble(t, Options{}, "")
	tests := []struct {
		name string
		req  *qdrant.CreateCollection
		code codes.Code
	}{
		{"zero size", &qdrant.CreateCollection{CollectionName: "c",
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 0, Distance: qdrant.Distance_Dot})}, codes.InvalidArgument},
		{"no distance", &qdrant.CreateCollection{CollectionName: "c",
			VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 2})}, codes.InvalidArgument},
		{"named vectors", &qdrant.CreateCollection{CollectionName: "c",
			VectorsConfig: qdrant.NewVectorsConfigMap(map[string]*qdrant.VectorParams{"text": {Size: 2, Distance: qdrant.Distance_Dot}})}, codes.Unimplemented},
		{"no vectors", &qdrant.CreateCollection{CollectionName: "c"}, codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantStatus(t, client.CreateCollection(t.Context(), tt.req), tt.code, "")
		})
	}
}

func TestFieldIndexInInfo(t *testing.T) {
	client := startDouble(t, Options{}, "")
	newCollection(t, client, "chunks", 2, qdrant.Distance_Cosine)
	upsert(t, client, "chunks",
		pt(qdrant.NewIDNum(1), map[string]any{"document_key": "a", "version": 1}),
		pt(qdrant.NewIDNum(2), map[string]any{"document_key": "b", "version": "not a number"}),
		pt(qdrant.NewIDNum(3), map[string]any{"other": true}),
	)
	for _, idx := range []struct {
		field string
		typ   qdrant.FieldType
	}{
		{"document_key", qdrant.FieldType_FieldTypeKeyword},
		{"version", qdrant.FieldType_FieldTypeInteger},
	} {
		_, err := client.CreateFieldIndex(t.Context(), &qdrant.CreateFieldIndexCollection{
			CollectionName: "chunks", FieldName: idx.field, FieldType: qdrant.PtrOf(idx.typ), Wait: qdrant.PtrOf(true),
		})
		if err != nil {
			t.Fatalf("create index %s: %v", idx.field, err)
		}
	}

	info, err := client.GetCollectionInfo(t.Context(), "chunks")
	if err != nil {
		t.Fatalf("get info: %v", err)
	}
	tests := []struct {
		field  string
		typ    qdrant.PayloadSchemaType
		points uint64
	}{
		{"document_key", qdrant.PayloadSchemaType_Keyword, 2},
		{"version", qdrant.PayloadSchemaType_Integer, 1}, // a string is not in an integer index
	}
	if len(info.GetPayloadSchema()) != len(tests) {
		t.Errorf("got %d payload_schema entries, want %d", len(info.GetPayloadSchema()), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			got := info.GetPayloadSchema()[tt.field]
			if got.GetDataType() != tt.typ || got.GetPoints() != tt.points {
				t.Errorf("got %s with %d points, want %s with %d", got.GetDataType(), got.GetPoints(), tt.typ, tt.points)
			}
		})
	}

	_, err = client.CreateFieldIndex(t.Context(), &qdrant.CreateFieldIndexCollection{
		CollectionName: "chunks", FieldName: "text", FieldType: qdrant.PtrOf(qdrant.FieldType_FieldTypeText),
	})
	wantStatus(t, err, codes.Unimplemented, "")
}

// Every call naming a missing collection gets Qdrant's NotFound.
func TestMissingCollection(t *testing.T) {
	client := startDouble(t, Options{}, "")
	const name = "nope"
	calls := []struct {
		name string
		call func() error
	}{
		{"get info", func() error { _, err := client.GetCollectionInfo(t.Context(), name); return err }},
		{"create index", func() error {
			_, err := client.CreateFieldIndex(t.Context(), &qdrant.CreateFieldIndexCollection{
				CollectionName: name, FieldName: "k", FieldType: qdrant.PtrOf(qdrant.FieldType_FieldTypeKeyword)})
			return err
		}},
		{"upsert", func() error {
			_, err := client.Upsert(t.Context(), &qdrant.UpsertPoints{CollectionName: name, Points: []*qdrant.PointStruct{pt(qdrant.NewIDNum(1), nil)}})
			return err
		}},
		{"delete", func() error {
			_, err := client.Delete(t.Context(), &qdrant.DeletePoints{CollectionName: name, Points: qdrant.NewPointsSelector(qdrant.NewIDNum(1))})
			return err
		}},
		{"get", func() error {
			_, err := client.Get(t.Context(), &qdrant.GetPoints{CollectionName: name, Ids: []*qdrant.PointId{qdrant.NewIDNum(1)}})
			return err
		}},
		{"count", func() error {
			_, err := client.Count(t.Context(), &qdrant.CountPoints{CollectionName: name})
			return err
		}},
		{"scroll", func() error {
			_, err := client.Scroll(t.Context(), &qdrant.ScrollPoints{CollectionName: name})
			return err
		}},
		{"facet", func() error {
			_, err := client.Facet(t.Context(), &qdrant.FacetCounts{CollectionName: name, Key: "k"})
			return err
		}},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			wantStatus(t, tt.call(), codes.NotFound, "Not found: Collection `nope` doesn't exist!")
		})
	}
}
