package index

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// The filters below are the adapter's filters as it built them before it
// encoded them itself (filter.go): the references the encodings must
// equal, decoded. Versions go in ascending order, as the encoding has
// them (they went in a map's order before, which meant nothing).

// others is the filter of every point of w's documents that w does not
// write: an exact write's removals.
func others(w *project.Write) *qdrant.Filter {
	should := make([]*qdrant.Condition, 0, len(w.Live)+1)
	for _, d := range w.Live {
		f := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", d.Key)}}
		if len(d.Chunks) > 0 {
			keep := make([]*qdrant.PointId, len(d.Chunks))
			for i, c := range d.Chunks {
				keep[i] = qdrant.NewIDUUID(c.ID.String())
			}
			f.MustNot = []*qdrant.Condition{qdrant.NewHasID(keep...)}
		}
		should = append(should, qdrant.NewFilterAsCondition(f))
	}
	if len(w.Withdrawn) > 0 {
		keys := make([]string, len(w.Withdrawn))
		for i, d := range w.Withdrawn {
			keys[i] = d.Key
		}
		should = append(should, qdrant.NewMatchKeywords("document_key", keys...))
	}
	return &qdrant.Filter{Should: should}
}

// replaceable is the condition on a stored point that a write of the event
// at pos may replace it: the point's event is at or before pos in the same
// log, or not ordered with it (no position stored, another topic or
// partition). nil when pos is unknown: any point may be replaced, as
// before positions were stored.
func replaceable(pos project.Position) *qdrant.Condition {
	if pos.Topic == "" {
		return nil
	}
	should := []*qdrant.Condition{
		qdrant.NewIsEmpty(fieldOffset),
		qdrant.NewFilterAsCondition(&qdrant.Filter{MustNot: []*qdrant.Condition{qdrant.NewMatchKeyword(fieldTopic, pos.Topic)}}),
		qdrant.NewFilterAsCondition(&qdrant.Filter{MustNot: []*qdrant.Condition{qdrant.NewMatchInt(fieldPartition, int64(pos.Partition))}}),
		qdrant.NewRange(fieldOffset, &qdrant.Range{Lte: qdrant.PtrOf(float64(pos.Offset))}),
	}
	if id := topicID(pos); id != "" {
		// Another incarnation of the topic: not ordered.
		should = append(should, qdrant.NewFilterAsCondition(&qdrant.Filter{MustNot: []*qdrant.Condition{
			qdrant.NewIsEmpty(fieldTopicID), qdrant.NewMatchKeyword(fieldTopicID, id),
		}}))
	}
	return qdrant.NewFilterAsCondition(&qdrant.Filter{Should: should})
}

// obsolete is the filter of the points w makes obsolete: per version
// written, its documents' older versions; per document, its points of the
// written version, from the written event or an earlier one, that the
// write does not hold (a later event's points of the same version are
// not this write's to remove); per withdrawal version, its documents'
// versions up to it.
func obsolete(w *project.Write) *qdrant.Filter {
	live, withdrawn := map[int64][]string{}, map[int64][]string{}
	var should []*qdrant.Condition
	for _, d := range w.Live {
		live[d.Version] = append(live[d.Version], d.Key)
		same := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", d.Key), qdrant.NewMatchInt("version", d.Version)}}
		if c := replaceable(d.Position); c != nil {
			same.Must = append(same.Must, c)
		}
		if len(d.Chunks) > 0 {
			keep := make([]*qdrant.PointId, len(d.Chunks))
			for i, c := range d.Chunks {
				keep[i] = qdrant.NewIDUUID(c.ID.String())
			}
			same.MustNot = []*qdrant.Condition{qdrant.NewHasID(keep...)}
		}
		should = append(should, qdrant.NewFilterAsCondition(same))
	}
	for _, d := range w.Withdrawn {
		withdrawn[d.Version] = append(withdrawn[d.Version], d.Key)
	}
	clause := func(keys []string, conds ...*qdrant.Condition) *qdrant.Condition {
		return qdrant.NewFilterAsCondition(&qdrant.Filter{Must: append([]*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}, conds...)})
	}
	for _, v := range slices.Sorted(maps.Keys(live)) {
		should = append(should, clause(live[v], versionRange(&qdrant.Range{Lt: version(v)})))
	}
	for _, v := range slices.Sorted(maps.Keys(withdrawn)) {
		should = append(should, clause(withdrawn[v], versionRange(&qdrant.Range{Lte: version(v)})))
	}
	return &qdrant.Filter{Should: should}
}

func versionRange(r *qdrant.Range) *qdrant.Condition { return qdrant.NewRange("version", r) }

func version(v int64) *float64 { return qdrant.PtrOf(float64(v)) }

// filterWrites are writes whose filters cover every branch: documents with
// and without a log position and a topic id, without chunks, several
// versions in one write, withdrawals, and enough chunks that a length
// needs more than one byte.
func filterWrites() []*project.Write {
	pos := project.Position{Topic: "t", Partition: 3, Offset: 41}
	withID := pos
	withID.TopicID = project.TopicID(uuid.MustParse("6f1c1d1e-0000-4000-8000-000000000001"))
	many := storetest.Doc("many", 2)
	for i := range 300 {
		many.Chunks = append(many.Chunks, project.Chunk{ID: keys.ChunkID("many", 2, i), DocumentKey: "many", Version: 2, Ordinal: i})
	}
	doc := func(key string, version int64, p project.Position, texts ...string) project.Document {
		d := storetest.Doc(key, version, texts...)
		d.Position = p
		return d
	}
	return []*project.Write{
		{},
		{Live: []project.Document{doc("a", 1, project.Position{}, "x")}},
		{Live: []project.Document{doc("a", 1, pos, "x", "y"), doc("b", 3, withID, "z"), doc("c", 1, pos), many}},
		{Withdrawn: []project.Withdrawal{{Key: "d", Version: 2}, {Key: "e", Version: 1}, {Key: "f", Version: 2}}},
		{Live: []project.Document{doc("a", 5, withID, "x")}, Withdrawn: []project.Withdrawal{{Key: "g", Version: 9}}},
		{Live: []project.Document{doc("a", 1, project.Position{Topic: "t", Partition: 0, Offset: 0}, "x")}},
	}
}

// decodeFilter decodes the filter of a DeletePoints' points selector.
func decodeSelector(t *testing.T, selector []byte) *qdrant.Filter {
	t.Helper()
	call := &qdrant.DeletePoints{}
	if err := proto.Unmarshal(selector, call); err != nil {
		t.Fatal(err)
	}
	return call.GetPoints().GetFilter()
}

func TestFiltersEqualMessages(t *testing.T) {
	for i, w := range filterWrites() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got, want := decodeSelector(t, appendDeleteFilter(nil, func(b []byte) []byte { return appendObsolete(b, w) })), obsolete(w); !proto.Equal(got, want) {
				t.Errorf("obsolete:\n got %v\nwant %v", got, want)
			}
			if got, want := decodeSelector(t, appendDeleteFilter(nil, func(b []byte) []byte { return appendOthers(b, w) })), others(w); !proto.Equal(got, want) {
				t.Errorf("others:\n got %v\nwant %v", got, want)
			}
			var shoulds []byte
			var want []*qdrant.Condition
			for _, d := range w.Live {
				shoulds = appendDocReplace(shoulds, &d)
				must := []*qdrant.Condition{qdrant.NewMatchKeyword("document_key", d.Key)}
				if c := replaceable(d.Position); c != nil {
					must = append(must, c)
				}
				want = append(want, qdrant.NewFilterAsCondition(&qdrant.Filter{Must: must}))
			}
			call := &qdrant.UpsertPoints{}
			if err := proto.Unmarshal(appendUpdateFilter(nil, shoulds), call); err != nil {
				t.Fatal(err)
			}
			if got := call.GetUpdateFilter(); len(w.Live) > 0 && !proto.Equal(got, &qdrant.Filter{Should: want}) {
				t.Errorf("update filter:\n got %v\nwant %v", got, &qdrant.Filter{Should: want})
			}
		})
	}
}

// TestAppendMessageLengths: a message's length is right whatever its
// varint's size, the one byte kept for it or more.
func TestAppendMessageLengths(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 1 << 21} {
		b := appendMessage([]byte{0xAA}, 7, func(b []byte) []byte {
			for i := range n {
				b = append(b, byte(i))
			}
			return b
		})
		num, typ, l := protowire.ConsumeTag(b[1:])
		v, m := protowire.ConsumeBytes(b[1+l:])
		if num != 7 || typ != protowire.BytesType || m < 0 || len(v) != n || 1+l+m != len(b) {
			t.Fatalf("%d bytes: field %d type %d, %d bytes of %d", n, num, typ, len(v), len(b))
		}
		for i := range v {
			if v[i] != byte(i) {
				t.Fatalf("%d bytes: byte %d moved wrong", n, i)
			}
		}
	}
}

func BenchmarkObsoleteFilter(b *testing.B) {
	w := filterWrites()[2]
	b.ReportAllocs()
	for b.Loop() {
		_ = appendDeleteFilter(nil, func(b []byte) []byte { return appendObsolete(b, w) })
	}
}

func BenchmarkObsoleteFilterMessages(b *testing.B) {
	w := filterWrites()[2]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := proto.Marshal(&qdrant.DeletePoints{Points: qdrant.NewPointsSelectorFilter(obsolete(w))}); err != nil {
			b.Fatal(err)
		}
	}
}
