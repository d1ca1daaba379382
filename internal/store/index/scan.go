package index

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Every fence reads back the ids of a batch's points, so the scroll
// answer is decoded here from protobuf's wire format rather than into
// qdrant.RetrievedPoint messages: a point's id, payload map and values
// were a dozen allocations each, most of an id fence's CPU. The answer
// arrives as the unknown fields of an empty message, which protobuf keeps
// as they are (as the upserts' points travel, wire.go).

// Field numbers of Qdrant's ScrollResponse and RetrievedPoint
// (points.proto of qdrant-client 1.17); the others are in wire.go.
const (
	scrollNextOffset = 1 // ScrollResponse.next_page_offset
	scrollResult     = 2 // ScrollResponse.result
	retrievedID      = 1 // RetrievedPoint.id
	retrievedPayload = 2 // RetrievedPoint.payload, map<string, Value>
	pointIDNum       = 1 // PointId.num
)

// scanned is a point of a scroll page: its id and the payload fields the
// scroll asked for, read from the wire when asked.
type scanned struct {
	id      uuid.UUID
	payload [][]byte // map entries: key and Value
}

// ID is the point's UUID, or uuid.Nil for a numeric or malformed id: such
// a point was not written by the projector.
func (p *scanned) ID() uuid.UUID { return p.id }

// String is the payload's string field name, "" when it has none.
func (p *scanned) String(name string) string {
	v, _ := p.value(name, valueString, protowire.BytesType)
	return string(v)
}

// Int is the payload's integer field name, 0 when it has none.
func (p *scanned) Int(name string) int64 {
	v, ok := p.value(name, valueInteger, protowire.VarintType)
	if !ok {
		return 0
	}
	n, _ := protowire.ConsumeVarint(v)
	return int64(n)
}

// value finds the payload entry name and returns its Value's field num of
// type typ (for a varint, the bytes from the varint on).
func (p *scanned) value(name string, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	for _, e := range p.payload {
		var key, val []byte
		for len(e) > 0 {
			n, t, l := protowire.ConsumeTag(e)
			if l < 0 {
				return nil, false
			}
			e = e[l:]
			if t == protowire.BytesType && (n == mapKey || n == mapValue) {
				b, l := protowire.ConsumeBytes(e)
				if l < 0 {
					return nil, false
				}
				if n == mapKey {
					key = b
				} else {
					val = b
				}
				e = e[l:]
				continue
			}
			if l = protowire.ConsumeFieldValue(n, t, e); l < 0 {
				return nil, false
			}
			e = e[l:]
		}
		if string(key) != name {
			continue
		}
		return field(val, num, typ)
	}
	return nil, false
}

// field returns the last field num of type typ in the message b (for a
// bytes field its contents, for a varint the bytes from it on).
func field(b []byte, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	var out []byte
	found := false
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		if n == num && t == typ {
			found = true
			if t == protowire.BytesType {
				v, l := protowire.ConsumeBytes(b)
				if l < 0 {
					return nil, false
				}
				out = v
			} else {
				out = b
			}
		}
		if l = protowire.ConsumeFieldValue(n, t, b); l < 0 {
			return nil, false
		}
		b = b[l:]
	}
	return out, found
}

// scan calls fn for every point matching filter, a page at a time, with
// the named payload fields. Memory stays at one page whatever the total.
func (s *Store) scan(ctx context.Context, filter *qdrant.Filter, fields []string, fn func(*scanned) error) error {
	var offset *qdrant.PointId
	conn := s.client.GetGrpcClient().Conn()
	var p scanned
	for {
		answer := &emptypb.Empty{}
		err := conn.Invoke(ctx, qdrant.Points_Scroll_FullMethodName, &qdrant.ScrollPoints{
			CollectionName: s.cfg.Collection,
			Filter:         filter,
			Offset:         offset,
			Limit:          qdrant.PtrOf(uint32(scrollPage)),
			WithPayload:    qdrant.NewWithPayloadInclude(fields...),
			WithVectors:    qdrant.NewWithVectors(false),
		}, answer)
		if err != nil {
			return classify(ctx, fmt.Errorf("scroll points: %w", err))
		}
		offset = nil
		b := answer.ProtoReflect().GetUnknown()
		for len(b) > 0 {
			n, t, l := protowire.ConsumeTag(b)
			if l < 0 {
				return classify(ctx, malformed("scroll answer"))
			}
			b = b[l:]
			switch {
			case n == scrollResult && t == protowire.BytesType:
				v, l := protowire.ConsumeBytes(b)
				if l < 0 || !p.decode(v) {
					return classify(ctx, malformed("scrolled point"))
				}
				b = b[l:]
				if err := fn(&p); err != nil {
					return err
				}
				continue
			case n == scrollNextOffset && t == protowire.BytesType:
				v, l := protowire.ConsumeBytes(b)
				if l < 0 {
					return classify(ctx, malformed("scroll offset"))
				}
				if offset = decodePointID(v); offset == nil {
					return classify(ctx, malformed("scroll offset"))
				}
				b = b[l:]
				continue
			}
			if l = protowire.ConsumeFieldValue(n, t, b); l < 0 {
				return classify(ctx, malformed("scroll answer"))
			}
			b = b[l:]
		}
		if offset == nil {
			return nil
		}
	}
}

// decode reads a RetrievedPoint into p, reusing its payload slice.
func (p *scanned) decode(b []byte) bool {
	p.id, p.payload = uuid.Nil, p.payload[:0]
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if t == protowire.BytesType && (n == retrievedID || n == retrievedPayload) {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return false
			}
			if n == retrievedID {
				p.id = uuid.Nil
				if s, ok := field(v, pointIDUUID, protowire.BytesType); ok {
					if id, err := uuid.ParseBytes(s); err == nil {
						p.id = id
					}
				}
			} else {
				p.payload = append(p.payload, v)
			}
			b = b[l:]
			continue
		}
		if l = protowire.ConsumeFieldValue(n, t, b); l < 0 {
			return false
		}
		b = b[l:]
	}
	return true
}

// decodePointID reads a PointId; nil when it holds neither a number nor a
// UUID.
func decodePointID(b []byte) *qdrant.PointId {
	if s, ok := field(b, pointIDUUID, protowire.BytesType); ok {
		return qdrant.NewIDUUID(string(s))
	}
	if v, ok := field(b, pointIDNum, protowire.VarintType); ok {
		n, l := protowire.ConsumeVarint(v)
		if l < 0 {
			return nil
		}
		return qdrant.NewIDNum(n)
	}
	return nil
}

// malformed is the error of an answer that is not the protobuf Qdrant
// sends: a bug of the server's or of the connection, not a record's.
func malformed(what string) error {
	return fmt.Errorf("scroll points: a malformed %s", what)
}
