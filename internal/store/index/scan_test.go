package index

import (
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"
)

// TestScannedReadsWhatQdrantSends decodes points as protobuf encodes
// them, with the fields a scroll asks for and others around them.
func TestScannedReadsWhatQdrantSends(t *testing.T) {
	id := uuid.New()
	for _, tc := range []struct {
		name    string
		point   *qdrant.RetrievedPoint
		wantID  uuid.UUID
		key     string
		version int64
	}{
		{"uuid id and fields", &qdrant.RetrievedPoint{Id: qdrant.NewIDUUID(id.String()), Payload: map[string]*qdrant.Value{
			"document_key": qdrant.NewValueString("doc-1"), "version": qdrant.NewValueInt(-7), "title": qdrant.NewValueString("t"),
			"meta": qdrant.NewValueStruct(&qdrant.Struct{Fields: map[string]*qdrant.Value{"document_key": qdrant.NewValueString("inner")}}),
		}, OrderValue: qdrant.NewOrderValueInt(3)}, id, "doc-1", -7},
		{"numeric id", &qdrant.RetrievedPoint{Id: qdrant.NewIDNum(42), Payload: map[string]*qdrant.Value{"document_key": qdrant.NewValueString("k")}}, uuid.Nil, "k", 0},
		{"malformed uuid", &qdrant.RetrievedPoint{Id: qdrant.NewIDUUID("not-a-uuid")}, uuid.Nil, "", 0},
		{"a field of another type", &qdrant.RetrievedPoint{Id: qdrant.NewIDUUID(id.String()), Payload: map[string]*qdrant.Value{
			"document_key": qdrant.NewValueInt(5), "version": qdrant.NewValueString("5"),
		}}, id, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.point)
			if err != nil {
				t.Fatal(err)
			}
			var p scanned
			if !p.decode(b) {
				t.Fatal("decode refused a point protobuf encoded")
			}
			if p.ID() != tc.wantID || p.String("document_key") != tc.key || p.Int("version") != tc.version || p.String("missing") != "" {
				t.Errorf("decoded %v %q %d, want %v %q %d", p.ID(), p.String("document_key"), p.Int("version"), tc.wantID, tc.key, tc.version)
			}
		})
	}
}

func TestDecodePointID(t *testing.T) {
	for _, want := range []*qdrant.PointId{qdrant.NewIDUUID(uuid.NewString()), qdrant.NewIDNum(0), qdrant.NewIDNum(1 << 60)} {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodePointID(b); !proto.Equal(got, want) {
			t.Errorf("decodePointID = %v, want %v", got, want)
		}
	}
	if got := decodePointID(nil); got != nil {
		t.Errorf("decodePointID(empty) = %v, want nil", got)
	}
}

// FuzzScannedDecode: no answer, however malformed, panics the decoder.
func FuzzScannedDecode(f *testing.F) {
	b, _ := proto.Marshal(&qdrant.RetrievedPoint{Id: qdrant.NewIDNum(1), Payload: map[string]*qdrant.Value{"document_key": qdrant.NewValueString("k")}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p scanned
		if p.decode(b) {
			_ = p.String("document_key")
			_ = p.Int("version")
		}
		_ = decodePointID(b)
	})
}
