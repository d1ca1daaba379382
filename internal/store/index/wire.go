package index

import (
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/projector/projector/internal/project"
)

// An upsert's points are encoded here, in protobuf's wire format, instead
// of built as qdrant.PointStruct messages for gRPC's codec to encode: a
// document's chunks share most of their payload (its key, version, title,
// source, metadata and position), which is encoded once per document and
// copied into each point, and a point's size is then the length of its
// bytes, not a second walk of its message. The points travel as the
// unknown fields of an otherwise empty UpsertPoints, which protobuf
// encodes as they are; field order means nothing on the wire. In a bench's
// profile the messages cost a fifth of the projector's CPU; wire_test.go
// holds the bytes equal, decoded, to the messages they replace.

// Field numbers of Qdrant's protos (points.proto, json_with_int.proto,
// collections.proto of qdrant-client 1.17) that the encoding writes.
const (
	upsertPointsPoints = 3 // UpsertPoints.points
	pointID            = 1 // PointStruct.id
	pointPayload       = 3 // PointStruct.payload, map<string, Value>
	pointVectors       = 4 // PointStruct.vectors
	pointIDUUID        = 2 // PointId.uuid
	mapKey             = 1 // a map entry's key
	mapValue           = 2 // a map entry's value
	valueNull          = 1 // Value.null_value
	valueDouble        = 2 // Value.double_value
	valueInteger       = 3 // Value.integer_value
	valueString        = 4 // Value.string_value
	valueBool          = 5 // Value.bool_value
	valueStruct        = 6 // Value.struct_value
	structFields       = 1 // Struct.fields, map<string, Value>
	vectorsVector      = 1 // Vectors.vector
	vectorDense        = 101
	denseData          = 1 // DenseVector.data, packed
)

// documentWire is the encoding of what a document's points share.
type documentWire struct {
	// shared are the payload entries every point of the document holds
	// alike.
	shared []byte
	// sharedMetadata is the encoded value of the document's metadata,
	// the metadata of each of its chunks that has none of its own;
	// metadata holds the encoded fields of that value, by key, for a
	// chunk that puts its own over some of them.
	sharedMetadata []byte
	metadata       map[string][]byte
}

func newDocumentWire(d *project.Document) (*documentWire, error) {
	rejected := func(err error) error {
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Rejected, Err: fmt.Errorf("payload of document %q: %w", d.Key, err)}
	}
	if err := validUTF8(d.Key, d.Title, d.Source); err != nil {
		return nil, rejected(err)
	}
	w := &documentWire{metadata: make(map[string][]byte, len(d.Metadata))}
	var fields []byte
	for k, v := range d.Metadata {
		field, err := appendField(nil, k, v)
		if err != nil {
			return nil, rejected(err)
		}
		w.metadata[k] = field
		fields = append(fields, field...)
	}
	w.sharedMetadata = appendStructValue(nil, fields)
	w.shared = appendStringEntry(w.shared, "document_key", d.Key)
	w.shared = appendIntEntry(w.shared, "version", d.Version)
	w.shared = appendStringEntry(w.shared, "title", d.Title)
	w.shared = appendStringEntry(w.shared, "source", d.Source)
	if d.Position.Topic != "" {
		w.shared = appendStringEntry(w.shared, fieldTopic, d.Position.Topic)
		w.shared = appendIntEntry(w.shared, fieldPartition, int64(d.Position.Partition))
		w.shared = appendIntEntry(w.shared, fieldOffset, d.Position.Offset)
		if id := topicID(d.Position); id != "" {
			w.shared = appendStringEntry(w.shared, fieldTopicID, id)
		}
	}
	return w, nil
}

// appendPoint appends the point of chunk c of the document to b, as an
// element of UpsertPoints.points. Its payload holds the shared entries,
// ordinal, text and metadata: the document's metadata with the chunk's own
// on top.
func (w *documentWire) appendPoint(b []byte, c *project.Chunk) ([]byte, error) {
	rejected := func(err error) error {
		return &project.StoreError{Store: project.StoreIndex, Kind: project.Rejected, Err: fmt.Errorf("payload of chunk %s: %w", c.ID, err)}
	}
	if err := validUTF8(c.Text); err != nil {
		return nil, rejected(err)
	}
	metadata := w.sharedMetadata
	if len(c.Metadata) > 0 {
		var fields []byte
		for k, field := range w.metadata {
			if _, mine := c.Metadata[k]; !mine {
				fields = append(fields, field...)
			}
		}
		for k, v := range c.Metadata {
			var err error
			if fields, err = appendField(fields, k, v); err != nil {
				return nil, rejected(err)
			}
		}
		metadata = appendStructValue(nil, fields)
	}
	idSize := pointIDSize
	payloadSize := len(w.shared) + intEntrySize("ordinal", int64(c.Ordinal)) + stringEntrySize("text", c.Text) + entrySize("metadata", len(metadata))
	dense := 0
	if len(c.Vector) > 0 {
		dense = protowire.SizeTag(denseData) + protowire.SizeBytes(4*len(c.Vector))
	}
	vector := protowire.SizeTag(vectorDense) + protowire.SizeBytes(dense)
	vectors := protowire.SizeTag(vectorsVector) + protowire.SizeBytes(vector)
	point := protowire.SizeTag(pointID) + protowire.SizeBytes(idSize) + payloadSize + protowire.SizeTag(pointVectors) + protowire.SizeBytes(vectors)

	b = slices.Grow(b, protowire.SizeTag(upsertPointsPoints)+protowire.SizeBytes(point))
	b = protowire.AppendTag(b, upsertPointsPoints, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(point))
	b = appendPointID(b, pointID, c.ID)
	b = append(b, w.shared...)
	b = appendIntEntry(b, "ordinal", int64(c.Ordinal))
	b = appendStringEntry(b, "text", c.Text)
	b = appendEntry(b, "metadata", metadata)
	b = protowire.AppendTag(b, pointVectors, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(vectors))
	b = protowire.AppendTag(b, vectorsVector, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(vector))
	b = protowire.AppendTag(b, vectorDense, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(dense))
	if len(c.Vector) > 0 {
		b = protowire.AppendTag(b, denseData, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(4*len(c.Vector)))
		for _, f := range c.Vector {
			b = protowire.AppendFixed32(b, math.Float32bits(f))
		}
	}
	return b, nil
}

const (
	// uuidTextSize is the length of a UUID's text form.
	uuidTextSize = 36
	// pointIDSize is the size of a PointId holding a UUID in its text
	// form: the uuid field's one-byte tag and length, then the text.
	pointIDSize = 2 + uuidTextSize
)

// appendPointID appends field num holding the PointId of id, its text
// form written in place (uuid.UUID.String allocates).
func appendPointID(b []byte, num protowire.Number, id uuid.UUID) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(pointIDSize))
	b = protowire.AppendTag(b, pointIDUUID, protowire.BytesType)
	b = protowire.AppendVarint(b, uuidTextSize)
	const digits = "0123456789abcdef"
	for i, x := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, digits[x>>4], digits[x&0xf])
	}
	return b
}

// appendField appends the field k of a metadata Struct, its value v a JSON
// scalar as the event decoder gives them (anything else as
// qdrant.NewValue takes it).
func appendField(b []byte, k string, v any) ([]byte, error) {
	if err := validUTF8(k); err != nil {
		return nil, err
	}
	var value []byte
	switch x := v.(type) {
	case nil:
		value = protowire.AppendVarint(protowire.AppendTag(nil, valueNull, protowire.VarintType), 0)
	case bool:
		value = protowire.AppendVarint(protowire.AppendTag(nil, valueBool, protowire.VarintType), protowire.EncodeBool(x))
	case int64:
		value = protowire.AppendVarint(protowire.AppendTag(nil, valueInteger, protowire.VarintType), uint64(x))
	case float64:
		value = protowire.AppendFixed64(protowire.AppendTag(nil, valueDouble, protowire.Fixed64Type), math.Float64bits(x))
	case string:
		if err := validUTF8(x); err != nil {
			return nil, err
		}
		value = protowire.AppendString(protowire.AppendTag(nil, valueString, protowire.BytesType), x)
	default:
		pv, err := qdrant.NewValue(v)
		if err != nil {
			return nil, err
		}
		if value, err = proto.Marshal(pv); err != nil {
			return nil, err
		}
	}
	inner := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(k)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(len(value))
	b = protowire.AppendTag(b, structFields, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = protowire.AppendTag(b, mapKey, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, mapValue, protowire.BytesType)
	return protowire.AppendBytes(b, value), nil
}

// appendStructValue appends a Value holding the Struct of the encoded
// fields.
func appendStructValue(b, fields []byte) []byte {
	b = protowire.AppendTag(b, valueStruct, protowire.BytesType)
	return protowire.AppendBytes(b, fields)
}

// entrySize is the size of a payload entry whose encoded value has n
// bytes; appendEntry appends it.
func entrySize(key string, n int) int {
	inner := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(n)
	return protowire.SizeTag(pointPayload) + protowire.SizeBytes(inner)
}

func appendEntry(b []byte, key string, value []byte) []byte {
	return append(appendEntryHead(b, key, len(value)), value...)
}

// appendEntryHead appends what comes before the n bytes of an entry's
// encoded value: the entry's tag and length, its key, and the value's tag
// and length.
func appendEntryHead(b []byte, key string, n int) []byte {
	inner := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(n)
	b = protowire.AppendTag(b, pointPayload, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = protowire.AppendTag(b, mapKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, mapValue, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// The entries of a string and an integer value, encoded without a Value
// message in between.
func stringValueSize(s string) int {
	return protowire.SizeTag(valueString) + protowire.SizeBytes(len(s))
}

func intValueSize(v int64) int {
	return protowire.SizeTag(valueInteger) + protowire.SizeVarint(uint64(v))
}

func stringEntrySize(key, s string) int { return entrySize(key, stringValueSize(s)) }

func intEntrySize(key string, v int64) int { return entrySize(key, intValueSize(v)) }

func appendStringEntry(b []byte, key, s string) []byte {
	b = appendEntryHead(b, key, stringValueSize(s))
	b = protowire.AppendTag(b, valueString, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendIntEntry(b []byte, key string, v int64) []byte {
	b = appendEntryHead(b, key, intValueSize(v))
	b = protowire.AppendTag(b, valueInteger, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}
