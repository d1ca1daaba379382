package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/projector/projector/internal/keys"
)

// Limits bound what one record may carry, so that the memory and work spent
// on a record are bounded whatever arrives on the topic.
type Limits struct {
	// MaxRecordBytes is the largest record value accepted.
	MaxRecordBytes int
	// MaxChunks is the most chunks one document may have, whether carried
	// in the event or produced by the splitter.
	MaxChunks int
	// VectorDim is the dimension of the index; carried vectors must match.
	VectorDim int
}

// DefaultLimits are the limits of `projector run` unless configured.
func DefaultLimits() Limits {
	return Limits{MaxRecordBytes: 1 << 20, MaxChunks: 1000, VectorDim: 384}
}

// Decoder turns records into Events. It is safe for concurrent use.
type Decoder struct {
	limits Limits
	split  Splitter
}

// NewDecoder returns a Decoder with the given limits and text splitter.
func NewDecoder(limits Limits, split Splitter) *Decoder {
	return &Decoder{limits: limits, split: split}
}

// Decode validates one record. key and value are the record's key and value
// (a nil value is a tombstone); headerCorrelationID is the value of the
// correlation-id header, used when the event has no correlation_id field.
// A bad record returns an *Error.
func (d *Decoder) Decode(key, value []byte, headerCorrelationID string) (Event, error) {
	if key == nil {
		return Event{}, errorf(ReasonMissingKey, "the record has no key; the key must be the document key")
	}
	if !utf8.Valid(key) {
		return Event{}, errorf(ReasonInvalidUTF8, "the record key is not valid UTF-8")
	}
	if err := checkKey(string(key)); err != nil {
		return Event{}, err
	}
	if value == nil {
		ev := Event{Key: string(key), Op: keys.OpWithdraw, Tombstone: true}
		if err := setCorrelation(&ev, headerCorrelationID); err != nil {
			return Event{}, err
		}
		return ev, nil
	}
	if len(value) > d.limits.MaxRecordBytes {
		return Event{}, errorf(ReasonTooLarge, "the record value has %d bytes, over the limit of %d", len(value), d.limits.MaxRecordBytes)
	}
	if !utf8.Valid(value) {
		return Event{}, errorf(ReasonInvalidUTF8, "the record value is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(value, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] != '{' {
		if json.Valid(value) {
			return Event{}, errorf(ReasonNotObject, "the record value is JSON but not an object")
		}
		return Event{}, errorf(ReasonNotJSON, "the record value is not JSON")
	}
	if ev, ok := d.decodeFast(string(key), value, headerCorrelationID); ok {
		return ev, nil
	}
	return d.decodeJSON(string(key), value, headerCorrelationID)
}

// decodeJSON is the reference decoding of a record value, through
// encoding/json: what decodeFast does not decode, it decodes, and it names
// the reason of every error.
func (d *Decoder) decodeJSON(key string, value []byte, headerCorrelationID string) (Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(value, &fields); err != nil {
		return Event{}, errorf(ReasonNotJSON, "the record value is not JSON: %s", jsonError(err))
	}
	return d.fromFields(key, fields, headerCorrelationID)
}

func (d *Decoder) fromFields(recordKey string, f map[string]json.RawMessage, headerCorrelationID string) (Event, error) {
	var ev Event
	docKey, ok, err := stringField(f, "document_key")
	if err != nil {
		return Event{}, err
	}
	if !ok {
		return Event{}, errorf(ReasonMissingField, "document_key is required")
	}
	if err := checkKey(docKey); err != nil {
		return Event{}, err
	}
	if docKey != recordKey {
		return Event{}, errorf(ReasonKeyMismatch, "document_key differs from the record key; the producer must key records by document_key to keep a document's events in order")
	}
	ev.Key = docKey

	raw, ok := present(f, "version")
	if !ok {
		return Event{}, errorf(ReasonMissingField, "version is required")
	}
	if ev.Version, err = parseVersion(raw); err != nil {
		return Event{}, err
	}

	op, ok, err := stringField(f, "op")
	if err != nil {
		return Event{}, err
	}
	switch {
	case !ok || op == string(keys.OpUpsert):
		ev.Op = keys.OpUpsert
	case op == string(keys.OpWithdraw):
		ev.Op = keys.OpWithdraw
	default:
		return Event{}, errorf(ReasonInvalidOp, "op must be %q or %q", keys.OpUpsert, keys.OpWithdraw)
	}

	cid, ok, err := stringField(f, "correlation_id")
	if err != nil {
		return Event{}, err
	}
	if !ok {
		cid = headerCorrelationID
	}
	if err := setCorrelation(&ev, cid); err != nil {
		return Event{}, err
	}
	if ev.Op == keys.OpWithdraw {
		// A withdrawal's content is not used: it removes the document.
		return ev, nil
	}

	if ev.Title, _, err = stringField(f, "title"); err != nil {
		return Event{}, err
	}
	if ev.Source, _, err = stringField(f, "source"); err != nil {
		return Event{}, err
	}
	if raw, ok := present(f, "metadata"); ok {
		if ev.Metadata, err = parseMetadata("metadata", raw); err != nil {
			return Event{}, err
		}
	}

	rawChunks, hasChunks := present(f, "chunks")
	text, hasText, err := stringField(f, "text")
	if err != nil {
		return Event{}, err
	}
	switch {
	case hasChunks && hasText:
		return Event{}, errorf(ReasonAmbiguousBody, "an event carries chunks or text, not both")
	case hasChunks:
		if ev.Chunks, err = d.parseChunks(rawChunks); err != nil {
			return Event{}, err
		}
	case hasText:
		ev.Chunks = d.split.Split(text)
		if len(ev.Chunks) > d.limits.MaxChunks {
			return Event{}, errorf(ReasonTooManyChunks, "text splits into %d chunks, over the limit of %d", len(ev.Chunks), d.limits.MaxChunks)
		}
	default:
		return Event{}, errorf(ReasonMissingField, "an upsert needs chunks or text")
	}
	ev.ContentHash = contentHash(&ev, text, hasText)
	return ev, nil
}

func (d *Decoder) parseChunks(raw json.RawMessage) ([]Chunk, *Error) {
	// One pass decodes the array and every chunk's fields; a null element
	// decodes to a nil map and is refused below.
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errorf(ReasonWrongType, "chunks must be an array of objects")
	}
	if len(items) > d.limits.MaxChunks {
		return nil, errorf(ReasonTooManyChunks, "%d chunks, over the limit of %d", len(items), d.limits.MaxChunks)
	}
	chunks := make([]Chunk, len(items))
	for i, f := range items {
		if f == nil {
			return nil, errorf(ReasonWrongType, "chunks[%d] must be an object", i)
		}
		text, ok, err := stringField(f, "text")
		if err != nil {
			err.Detail = "chunks[" + strconv.Itoa(i) + "]." + err.Detail
			return nil, err
		}
		if !ok {
			return nil, errorf(ReasonMissingField, "chunks[%d].text is required", i)
		}
		chunks[i].Text = text
		if raw, ok := present(f, "vector"); ok {
			if chunks[i].Vector, err = d.parseVector(i, raw); err != nil {
				return nil, err
			}
		}
		if raw, ok := present(f, "metadata"); ok {
			var merr *Error
			if chunks[i].Metadata, merr = parseMetadata("chunks["+strconv.Itoa(i)+"].metadata", raw); merr != nil {
				return nil, merr
			}
		}
	}
	return chunks, nil
}

func (d *Decoder) parseVector(i int, raw json.RawMessage) ([]float32, *Error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, errorf(ReasonWrongType, "chunks[%d].vector must be an array of numbers", i)
	}
	if len(nums) != d.limits.VectorDim {
		return nil, errorf(ReasonVectorDimension, "chunks[%d].vector has %d values, the index has dimension %d", i, len(nums), d.limits.VectorDim)
	}
	vec := make([]float32, len(nums))
	for j, n := range nums {
		v, err := strconv.ParseFloat(string(n), 64)
		f := float32(v)
		if err != nil || math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
			return nil, errorf(ReasonInvalidVector, "chunks[%d].vector[%d] is not a finite 32-bit float", i, j)
		}
		vec[j] = f
	}
	return vec, nil
}

// present returns a field's raw value; a JSON null counts as absent.
func present(f map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := f[name]
	if !ok || string(raw) == "null" {
		return nil, false
	}
	return raw, true
}

// stringField returns an optional string field, rejecting other JSON types and
// strings a store cannot hold.
func stringField(f map[string]json.RawMessage, name string) (string, bool, *Error) {
	raw, ok := present(f, name)
	if !ok {
		return "", false, nil
	}
	if raw[0] != '"' {
		return "", false, errorf(ReasonWrongType, "%s must be a string", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, errorf(ReasonWrongType, "%s must be a string", name)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", false, errorf(ReasonNULCharacter, "%s contains the character U+0000", name)
	}
	return s, true, nil
}

func parseVersion(raw json.RawMessage) (int64, *Error) {
	if raw[0] == '"' || raw[0] == '{' || raw[0] == '[' || raw[0] == 't' || raw[0] == 'f' {
		return 0, errorf(ReasonWrongType, "version must be an integer")
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, errorf(ReasonInvalidVersion, "version must be an integer from 1 to %d", int64(math.MaxInt64))
	}
	if v < 1 {
		return 0, errorf(ReasonInvalidVersion, "version must be >= 1, got %d", v)
	}
	return v, nil
}

func checkKey(k string) *Error {
	switch {
	case k == "":
		return errorf(ReasonInvalidKey, "document_key must not be empty")
	case len(k) > MaxKeyBytes:
		return errorf(ReasonInvalidKey, "document_key has %d bytes, over the limit of %d", len(k), MaxKeyBytes)
	case strings.IndexByte(k, 0) >= 0:
		return errorf(ReasonNULCharacter, "document_key contains the character U+0000")
	}
	return nil
}

func setCorrelation(ev *Event, cid string) *Error {
	switch {
	case len(cid) > MaxCorrelationIDBytes:
		return errorf(ReasonWrongType, "correlation_id has %d bytes, over the limit of %d", len(cid), MaxCorrelationIDBytes)
	case !utf8.ValidString(cid):
		return errorf(ReasonInvalidUTF8, "the correlation-id header is not valid UTF-8")
	case strings.IndexByte(cid, 0) >= 0:
		return errorf(ReasonNULCharacter, "correlation_id contains the character U+0000")
	}
	ev.CorrelationID = cid
	return nil
}

// parseMetadata accepts an object whose values are JSON scalars. Integers
// that fit int64 stay integers; other numbers become float64.
func parseMetadata(name string, raw json.RawMessage) (map[string]any, *Error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errorf(ReasonInvalidMetadata, "%s must be an object", name)
	}
	for k, v := range m {
		if strings.IndexByte(k, 0) >= 0 {
			return nil, errorf(ReasonNULCharacter, "a key of %s contains the character U+0000", name)
		}
		switch x := v.(type) {
		case nil, bool:
		case string:
			if strings.IndexByte(x, 0) >= 0 {
				return nil, errorf(ReasonNULCharacter, "%s.%s contains the character U+0000", name, k)
			}
		case json.Number:
			if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				m[k] = i
				continue
			}
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil || math.IsInf(f, 0) {
				return nil, errorf(ReasonInvalidMetadata, "%s.%s is a number out of range", name, k)
			}
			m[k] = f
		default:
			return nil, errorf(ReasonInvalidMetadata, "%s.%s must be a string, number, boolean or null", name, k)
		}
	}
	return m, nil
}

// jsonError keeps the parser's position but not the input it quotes.
func jsonError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "syntax error at byte " + strconv.FormatInt(se.Offset, 10)
	}
	return "cannot be decoded"
}

// contentHash hashes the event's content with a length-prefixed encoding, so
// no two different contents share an input. The leading format byte lets the
// encoding change without old hashes colliding with new ones.
func contentHash(ev *Event, text string, hasText bool) string {
	h := hashWriter{h: sha256.New(), buf: make([]byte, 0, hashBuffer)}
	h.byte(1)
	h.string(ev.Title)
	h.string(ev.Source)
	h.metadata(ev.Metadata)
	if hasText {
		h.byte('t')
		h.string(text)
	} else {
		h.byte('c')
		h.int(int64(len(ev.Chunks)))
		for _, c := range ev.Chunks {
			h.string(c.Text)
			h.int(int64(len(c.Vector)))
			for _, v := range c.Vector {
				h.need(4)
				h.buf = binary.LittleEndian.AppendUint32(h.buf, math.Float32bits(v))
			}
			h.metadata(c.Metadata)
		}
	}
	h.flush()
	return hex.EncodeToString(h.h.Sum(nil))
}

// hashBuffer is the size of a hashWriter's buffer.
const hashBuffer = 4096

// hashWriter feeds a hash through one buffer: writing every field to the
// hash.Hash itself made each one an allocation (a slice passed to an
// interface escapes), ten or more per chunk.
type hashWriter struct {
	h   hash.Hash
	buf []byte
}

// need makes room for n more bytes, flushing the buffer if it is short.
func (w *hashWriter) need(n int) {
	if len(w.buf)+n > cap(w.buf) {
		w.flush()
	}
}

func (w *hashWriter) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
}

func (w *hashWriter) byte(b byte) {
	w.need(1)
	w.buf = append(w.buf, b)
}

func (w *hashWriter) int(v int64) {
	w.need(8)
	w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(v))
}

// string writes s's length and s, a buffer at a time.
func (w *hashWriter) string(s string) {
	w.int(int64(len(s)))
	for len(s) > 0 {
		w.need(1)
		n := copy(w.buf[len(w.buf):cap(w.buf)], s)
		w.buf = w.buf[:len(w.buf)+n]
		s = s[n:]
	}
}

func (w *hashWriter) metadata(m map[string]any) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	w.int(int64(len(names)))
	for _, k := range names {
		w.string(k)
		switch v := m[k].(type) {
		case nil:
			w.byte('n')
		case bool:
			if v {
				w.byte('T')
			} else {
				w.byte('F')
			}
		case string:
			w.byte('s')
			w.string(v)
		case int64:
			w.byte('i')
			w.int(v)
		case float64:
			w.byte('f')
			w.int(int64(math.Float64bits(v)))
		}
	}
}
