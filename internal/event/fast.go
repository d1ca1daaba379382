package event

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/projector/projector/internal/keys"
)

// decodeFast decodes the record value of an event in one pass: it is the
// projector's own reading of the JSON the contract defines, which reads
// each byte once where encoding/json, into maps of raw values and each of
// those again, read a chunk's text seven times. It only ever succeeds with
// the event the reference decoding (fromFields) gives: whenever it meets
// anything else, an error of any kind or what it does not decode itself (a
// \u escape of a surrogate half, a vector given as strings, a nesting
// deeper than encoding/json takes), it reports false, and the caller
// decodes the value the reference way, which names every error's reason. A
// differential fuzz test holds the two together. value is valid UTF-8 and
// starts, after white space, with '{'.
func (d *Decoder) decodeFast(recordKey string, value []byte, headerCorrelationID string) (Event, bool) {
	s := scanner{b: value}
	var f fields
	if !s.event(d, &f) {
		return Event{}, false
	}
	var ev Event
	if !f.docKey.set || checkKey(f.docKey.s) != nil || f.docKey.s != recordKey || f.version == nil {
		return Event{}, false
	}
	ev.Key = f.docKey.s
	v, err := parseVersion(f.version)
	if err != nil {
		return Event{}, false
	}
	ev.Version = v
	switch {
	case !f.op.set || f.op.s == string(keys.OpUpsert):
		ev.Op = keys.OpUpsert
	case f.op.s == string(keys.OpWithdraw):
		ev.Op = keys.OpWithdraw
	default:
		return Event{}, false
	}
	cid := headerCorrelationID
	if f.correlation.set {
		cid = f.correlation.s
	}
	if setCorrelation(&ev, cid) != nil {
		return Event{}, false
	}
	if ev.Op == keys.OpWithdraw {
		return ev, true
	}
	ev.Title, ev.Source, ev.Metadata = f.title.s, f.source.s, f.metadata
	switch {
	case f.hasChunks && f.text.set:
		return Event{}, false
	case f.hasChunks:
		ev.Chunks = f.chunks
	case f.text.set:
		ev.Chunks = d.split.Split(f.text.s)
		if len(ev.Chunks) > d.limits.MaxChunks {
			return Event{}, false
		}
	default:
		return Event{}, false
	}
	ev.ContentHash = contentHash(&ev, f.text.s, f.text.set)
	return ev, true
}

// optional is a string member: set when it is there and not null.
type optional struct {
	s   string
	set bool
}

// fields are the members of an event the projector reads, decoded; a
// member given twice is its last value, as in encoding/json's decoding into
// a map, and a null one is absent.
type fields struct {
	docKey, op, correlation, title, source, text optional
	// version is the raw number, nil when absent.
	version   []byte
	metadata  map[string]any
	chunks    []Chunk
	hasChunks bool
}

// scanner reads JSON, with encoding/json's grammar.
type scanner struct {
	b []byte
	i int
}

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// at reports whether the next byte is c.
func (s *scanner) at(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

// null reads a null if one is next.
func (s *scanner) null() bool {
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// event reads the whole value into f: one object, nothing after it but
// white space.
func (s *scanner) event(d *Decoder, f *fields) bool {
	s.ws()
	ok := s.object(1, func(key string) bool {
		switch key {
		case "document_key":
			return s.optional(&f.docKey)
		case "op":
			return s.optional(&f.op)
		case "correlation_id":
			return s.optional(&f.correlation)
		case "title":
			return s.optional(&f.title)
		case "source":
			return s.optional(&f.source)
		case "text":
			return s.optional(&f.text)
		case "version":
			f.version = nil
			if s.null() {
				return true
			}
			start := s.i
			if !s.number() {
				return false
			}
			f.version = s.b[start:s.i]
			return true
		case "metadata":
			f.metadata = nil
			if s.null() {
				return true
			}
			var ok bool
			f.metadata, ok = s.metadata()
			return ok
		case "chunks":
			f.chunks, f.hasChunks = nil, false
			if s.null() {
				return true
			}
			var ok bool
			f.chunks, ok = d.chunks(s)
			f.hasChunks = ok
			return ok
		}
		return s.skip(2)
	})
	s.ws()
	return ok && s.i == len(s.b)
}

// optional reads a string member that may be null, as the reference's
// stringField takes it: a string a store can hold (no NUL).
func (s *scanner) optional(o *optional) bool {
	*o = optional{}
	if s.null() {
		return true
	}
	if !s.at('"') {
		return false
	}
	v, ok := s.str()
	if !ok || strings.IndexByte(v, 0) >= 0 {
		return false
	}
	*o = optional{s: v, set: true}
	return true
}

// object reads an object at s.i, calling member with each key and the
// scanner at its value, which member reads.
func (s *scanner) object(depth int, member func(key string) bool) bool {
	if depth > maxDepth || !s.at('{') {
		return false
	}
	s.i++
	s.ws()
	if s.at('}') {
		s.i++
		return true
	}
	for {
		s.ws()
		if !s.at('"') {
			return false
		}
		key, ok := s.str()
		if !ok {
			return false
		}
		s.ws()
		if !s.at(':') {
			return false
		}
		s.i++
		s.ws()
		if !member(key) {
			return false
		}
		s.ws()
		switch {
		case s.at(','):
			s.i++
		case s.at('}'):
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array at s.i, calling element with the scanner at each
// value, which element reads.
func (s *scanner) array(depth int, element func() bool) bool {
	if depth > maxDepth || !s.at('[') {
		return false
	}
	s.i++
	s.ws()
	if s.at(']') {
		s.i++
		return true
	}
	for {
		s.ws()
		if !element() {
			return false
		}
		s.ws()
		switch {
		case s.at(','):
			s.i++
		case s.at(']'):
			s.i++
			return true
		default:
			return false
		}
	}
}

// skip reads any value at s.i, checking its grammar.
func (s *scanner) skip(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth, func(string) bool { return s.skip(depth + 1) })
	case c == '[':
		return s.array(depth, func() bool { return s.skip(depth + 1) })
	case c == '"':
		return s.skipString()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

func (s *scanner) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

// number reads a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (s *scanner) number() bool {
	if s.at('-') {
		s.i++
	}
	switch {
	case s.at('0'):
		s.i++
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.at('.') {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.at('e') || s.at('E') {
		s.i++
		if s.at('+') || s.at('-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads [0-9]+.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// plain returns the length of the run of bytes at the start of b that
// end no string: no quote, backslash or control character.
func plain(b []byte) int {
	for i, c := range b {
		if c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}

// skipString reads a string at s.i without decoding it.
func (s *scanner) skipString() bool {
	s.i++
	for {
		s.i += plain(s.b[s.i:])
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case '"':
			s.i++
			return true
		case '\\':
			if s.i+1 >= len(s.b) {
				return false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if _, ok := hex4(s.b[s.i+2:]); !ok {
					return false
				}
				s.i += 6
			default:
				return false
			}
		default:
			return false // a control character
		}
	}
}

// str decodes a string at s.i as encoding/json does; it gives up (false) on
// a \u escape of a surrogate half, which encoding/json pairs or replaces.
func (s *scanner) str() (string, bool) {
	s.i++
	start := s.i
	s.i += plain(s.b[s.i:])
	if s.at('"') {
		v := string(s.b[start:s.i])
		s.i++
		return v, true
	}
	buf := append(make([]byte, 0, s.i-start+16), s.b[start:s.i]...)
	for {
		n := plain(s.b[s.i:])
		buf = append(buf, s.b[s.i:s.i+n]...)
		s.i += n
		switch {
		case s.at('"'):
			s.i++
			return string(buf), true
		case !s.at('\\') || s.i+1 >= len(s.b):
			return "", false // a control character, or the end
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(s.b[s.i:])
			if !ok || utf16.IsSurrogate(r) {
				return "", false
			}
			buf = utf8.AppendRune(buf, r)
			s.i += 4
		default:
			return "", false
		}
	}
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// metadata reads an object of JSON scalars, as parseMetadata does.
func (s *scanner) metadata() (map[string]any, bool) {
	m := map[string]any{}
	ok := s.object(2, func(key string) bool {
		if strings.IndexByte(key, 0) >= 0 {
			return false
		}
		v, ok := s.scalar()
		m[key] = v
		return ok
	})
	return m, ok
}

// scalar reads a metadata value: a string, an integer (int64) or another
// number (float64), true, false or null.
func (s *scanner) scalar() (any, bool) {
	if s.i >= len(s.b) {
		return nil, false
	}
	switch s.b[s.i] {
	case '"':
		v, ok := s.str()
		return v, ok && strings.IndexByte(v, 0) < 0
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return nil, s.literal("null")
	case '{', '[':
		return nil, false
	}
	start := s.i
	if !s.number() {
		return nil, false
	}
	raw := string(s.b[start:s.i])
	if i, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, false
	}
	return f, true
}

// chunks reads the chunks member: an array of objects with text, and
// optionally vector and metadata, as parseChunks does.
func (d *Decoder) chunks(s *scanner) ([]Chunk, bool) {
	out := make([]Chunk, 0, 8)
	ok := s.array(2, func() bool {
		if len(out) >= d.limits.MaxChunks || !s.at('{') {
			return false
		}
		c, ok := d.chunk(s)
		out = append(out, c)
		return ok
	})
	return out, ok
}

// chunk reads one chunk object.
func (d *Decoder) chunk(s *scanner) (Chunk, bool) {
	var (
		c    Chunk
		text optional
	)
	ok := s.object(3, func(key string) bool {
		switch key {
		case "text":
			return s.optional(&text)
		case "vector":
			c.Vector = nil
			if s.null() {
				return true
			}
			var ok bool
			c.Vector, ok = d.vector(s)
			return ok
		case "metadata":
			c.Metadata = nil
			if s.null() {
				return true
			}
			var ok bool
			c.Metadata, ok = s.metadata()
			return ok
		}
		return s.skip(4)
	})
	c.Text = text.s
	return c, ok && text.set
}

// vector reads an array of numbers of the index's dimension, each a finite
// 32-bit float, as parseVector does.
func (d *Decoder) vector(s *scanner) ([]float32, bool) {
	vec := make([]float32, 0, d.limits.VectorDim)
	ok := s.array(4, func() bool {
		start := s.i
		if !s.number() {
			return false
		}
		v, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
		f := float32(v)
		if err != nil || math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
			return false
		}
		vec = append(vec, f)
		return true
	})
	return vec, ok && len(vec) == d.limits.VectorDim
}
