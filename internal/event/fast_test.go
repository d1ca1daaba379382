package event

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeFastMatchesReference: whenever the one-pass decoding succeeds,
// the reference decoding through encoding/json succeeds with the same
// event; the one-pass decoding may give up on anything, and the reference
// then decides. The seeds are FuzzDecode's, and the cases below.
func FuzzDecodeFastMatchesReference(f *testing.F) {
	for _, v := range []string{
		`{"document_key":"d","version":1,"text":"hello"}`,
		`{"document_key":"d","version":2,"chunks":[{"text":"a","vector":[1,2]}],"metadata":{"k":1.5}}`,
		`{"document_key":"d","version":1,"op":"withdraw"}`,
		`{"document_key":"d","version":1,"title":"t","title":null,"text":"x"}`,
		`{"document_key":"d","version":3,"chunks":[{"text":"a\n\"b\"\u00e9\u0000"}]}`,
		`{"document_key":"d","version":3,"chunks":[{"text":"\ud83d\ude00"}]}`,
		`{"Document_Key":"d","document_key":"d","version":1,"text":"x","extra":{"a":[1,{"b":null}]}}`,
		`{"document_key":"d","version":1e0,"text":"x"}`,
		`{"document_key":"d","version":1,"metadata":{"a":1,"a":"two","n":12345678901234567890,"f":-0.5e-3},"text":"x"}`,
		`  {"document_key":"d","version":1,"chunks":[]}  `,
		`{"document_key":"d","version":1,"chunks":[{"text":"a","metadata":null,"vector":null}],"correlation_id":"c"}`,
	} {
		f.Add([]byte("d"), []byte(v))
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		d := NewDecoder(Limits{MaxRecordBytes: 1 << 16, MaxChunks: 50, VectorDim: 2}, Splitter{MaxBytes: 32})
		if !utf8.Valid(key) || !utf8.Valid(value) || !bytes.HasPrefix(bytes.TrimLeft(value, " \t\r\n"), []byte("{")) {
			return
		}
		fast, ok := d.decodeFast(string(key), value, "h")
		if !ok {
			return
		}
		ref, err := d.decodeJSON(string(key), value, "h")
		if err != nil {
			t.Fatalf("the one-pass decoding took %q, which the reference refuses: %v", value, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("%q decodes to\n %+v\nin one pass, to\n %+v\nby the reference", value, fast, ref)
		}
	})
}

// TestDecodeFastTakesTheCommonShapes: the shapes the projector sees every
// time are decoded in one pass, not left to the reference.
func TestDecodeFastTakesTheCommonShapes(t *testing.T) {
	d := NewDecoder(DefaultLimits(), Splitter{MaxBytes: DefaultChunkBytes})
	for _, v := range []string{
		`{"document_key":"k","version":4,"title":"T","source":"s","metadata":{"lang":"en","pages":12,"draft":false,"score":0.5},"chunks":[{"text":"one"},{"text":"two \"quoted\"\n","metadata":{"page":2}}]}`,
		`{"document_key":"k","version":1,"text":"` + strings.Repeat("Lorem ipsum. ", 200) + `","correlation_id":"c-1"}`,
		`{"document_key":"k","version":9,"op":"withdraw"}`,
	} {
		if _, ok := d.decodeFast("k", []byte(v), ""); !ok {
			t.Errorf("the one-pass decoding gave up on %.80s", v)
		}
	}
}
