package index

import (
	"strings"
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// messagePoint is the point of chunk c of d built as a message, the way
// the adapter built them before it encoded them itself: the reference the
// encoding must equal.
func messagePoint(t *testing.T, d *project.Document, c *project.Chunk) *qdrant.PointStruct {
	t.Helper()
	md, err := qdrant.NewStruct(d.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	metadata := qdrant.NewValueStruct(md)
	if len(c.Metadata) > 0 {
		fields := map[string]*qdrant.Value{}
		for k, v := range md.GetFields() {
			fields[k] = v
		}
		for k, v := range c.Metadata {
			if fields[k], err = qdrant.NewValue(v); err != nil {
				t.Fatal(err)
			}
		}
		metadata = qdrant.NewValueFromFields(fields)
	}
	payload := map[string]*qdrant.Value{
		"document_key": qdrant.NewValueString(d.Key),
		"version":      qdrant.NewValueInt(d.Version),
		"ordinal":      qdrant.NewValueInt(int64(c.Ordinal)),
		"text":         qdrant.NewValueString(c.Text),
		"title":        qdrant.NewValueString(d.Title),
		"source":       qdrant.NewValueString(d.Source),
		"metadata":     metadata,
	}
	if d.Position.Topic != "" {
		payload[fieldTopic] = qdrant.NewValueString(d.Position.Topic)
		payload[fieldPartition] = qdrant.NewValueInt(int64(d.Position.Partition))
		payload[fieldOffset] = qdrant.NewValueInt(d.Position.Offset)
		if id := topicID(d.Position); id != "" {
			payload[fieldTopicID] = qdrant.NewValueString(id)
		}
	}
	return &qdrant.PointStruct{Id: qdrant.NewIDUUID(c.ID.String()), Vectors: qdrant.NewVectorsDense(c.Vector), Payload: payload}
}

// TestWireEqualsMessages: the points the adapter encodes itself decode to
// exactly the messages they replace, for documents with and without a log
// position and a topic id, chunks with and without metadata of their own,
// empty and non-ASCII strings, a first ordinal and a large version.
func TestWireEqualsMessages(t *testing.T) {
	plain := storetest.Doc("plain", 1, "one", "", "ünïcødé 🚀 and \"quotes\"\n")
	plain.Metadata, plain.Title, plain.Source = nil, "", ""
	placed := storetest.Doc("tenant-7/report-123", 1<<40, strings.Repeat("long text ", 300), "two")
	placed.Position = project.Position{Topic: "documents", Partition: 7, Offset: 1 << 33}
	placed.Chunks[1].Metadata = map[string]any{"lang": "fr", "extra": int64(-3), "ok": true, "none": nil, "f": 0.25}
	incarnated := storetest.Doc("incarnated", 2, "x")
	incarnated.Position = project.Position{Topic: "documents", TopicID: project.TopicID{9, 8, 7}, Offset: 0}
	incarnated.Chunks[0].Vector = nil
	incarnated.Chunks[0].ID = keys.ChunkID("incarnated", 2, 0)
	for _, d := range []project.Document{plain, placed, incarnated} {
		wire, err := newDocumentWire(&d)
		if err != nil {
			t.Fatal(err)
		}
		var encoded []byte
		want := &qdrant.UpsertPoints{CollectionName: "c", Wait: qdrant.PtrOf(true)}
		for i := range d.Chunks {
			if encoded, err = wire.appendPoint(encoded, &d.Chunks[i]); err != nil {
				t.Fatal(err)
			}
			want.Points = append(want.Points, messagePoint(t, &d, &d.Chunks[i]))
		}
		call := &qdrant.UpsertPoints{CollectionName: "c", Wait: qdrant.PtrOf(true)}
		call.ProtoReflect().SetUnknown(encoded)
		b, err := proto.Marshal(call)
		if err != nil {
			t.Fatal(err)
		}
		got := &qdrant.UpsertPoints{}
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%s: the encoded points do not decode: %v", d.Key, err)
		}
		if !proto.Equal(want, got) {
			t.Errorf("%s: the encoded points decode to\n%s\nwant the messages\n%s", d.Key, protojson.Format(got), protojson.Format(want))
		}
		if n := proto.Size(&qdrant.UpsertPoints{Points: want.Points}); n != len(encoded) {
			t.Errorf("%s: the encoded points have %d bytes, the messages %d", d.Key, len(encoded), n)
		}
	}
}
