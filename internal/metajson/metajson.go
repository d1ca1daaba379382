// Package metajson writes metadata, the contract's flat objects of JSON
// scalars, as JSON text for the graph's and the relational store's
// columns. encoding/json reflects over every map entry, which made it the
// largest source of allocations of a batch's writes; metadata has four
// kinds of value, so it is written directly, with the same bytes as
// encoding/json (or, for Floats WithPoint, as the relational store has
// always written its floats). Anything else falls back to encoding/json.
package metajson

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Floats says how a float64 value is written.
type Floats int

const (
	// AsJSON writes floats as encoding/json does: 3 for 3.0.
	AsJSON Floats = iota
	// WithPoint keeps a decimal point or an exponent (3.0, 1e+21): jsonb
	// keeps it, so a reader of the column can tell 3.0 from 3.
	WithPoint
)

// Marshal returns m as a JSON object with its keys sorted, as
// encoding/json does; equal maps give equal text.
func Marshal(m map[string]any, floats Floats) (string, error) {
	if b, ok := appendObject(make([]byte, 0, 64), m, floats); ok {
		return string(b), nil
	}
	return fallback(m, floats)
}

// fallback is encoding/json's text, with floats as Floats says.
func fallback(m map[string]any, floats Floats) (string, error) {
	if floats == WithPoint {
		typed := make(map[string]any, len(m))
		for k, v := range m {
			if f, ok := v.(float64); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
				v = json.Number(string(appendPointFloat(nil, f)))
			}
			typed[k] = v
		}
		m = typed
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// appendObject appends m's JSON to b; false where a key or value is not
// one it writes exactly as encoding/json would.
func appendObject(b []byte, m map[string]any, floats Floats) ([]byte, bool) {
	var small [8]string
	names := small[:0]
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		if !plain(k) {
			return nil, false
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		switch v := m[k].(type) {
		case nil:
			b = append(b, "null"...)
		case bool:
			b = strconv.AppendBool(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case string:
			if !plain(v) {
				return nil, false
			}
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		case float64:
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, false // encoding/json's error
			}
			if floats == WithPoint {
				b = appendPointFloat(b, v)
			} else {
				b = appendJSONFloat(b, v)
			}
		default:
			return nil, false
		}
	}
	return append(b, '}'), true
}

// plain reports whether encoding/json writes s between quotes as it is:
// valid UTF-8 without control characters, quotes, backslashes, the
// characters it escapes for HTML (<, >, &) or U+2028 and U+2029.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
		if c >= utf8.RuneSelf {
			return utf8.ValidString(s[i:]) && !strings.ContainsRune(s[i:], '\u2028') && !strings.ContainsRune(s[i:], '\u2029')
		}
	}
	return true
}

// appendJSONFloat writes f as encoding/json does: the shortest decimal
// that reads back as f, in exponent form only for very large or small
// magnitudes, with a one-digit negative exponent where it has one.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendPointFloat writes f in the shortest form that reads back as f,
// with ".0" where that form has neither a point nor an exponent.
func appendPointFloat(b []byte, f float64) []byte {
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if !bytes.ContainsAny(b[start:], ".e") {
		b = append(b, ".0"...)
	}
	return b
}
