package event

import (
	"errors"
	"strings"
	"testing"

	"github.com/projector/projector/internal/keys"
)

func testDecoder() *Decoder {
	return NewDecoder(Limits{MaxRecordBytes: 4096, MaxChunks: 3, VectorDim: 2}, Splitter{MaxBytes: 16})
}

func TestDecodeBadInput(t *testing.T) {
	tests := []struct {
		name  string
		key   []byte
		value string
		want  Reason
	}{
		{"not json", []byte("d"), `{"document_key":`, ReasonNotJSON},
		{"empty value", []byte("d"), ``, ReasonNotJSON},
		{"garbage", []byte("d"), "\x01\x02", ReasonNotJSON},
		{"array", []byte("d"), `[1,2]`, ReasonNotObject},
		{"json null", []byte("d"), `null`, ReasonNotObject},
		{"string", []byte("d"), `"x"`, ReasonNotObject},
		{"no record key", nil, `{"document_key":"d","version":1,"chunks":[]}`, ReasonMissingKey},
		{"missing document_key", []byte("d"), `{"version":1,"chunks":[]}`, ReasonMissingField},
		{"null document_key", []byte("d"), `{"document_key":null,"version":1,"chunks":[]}`, ReasonMissingField},
		{"number document_key", []byte("d"), `{"document_key":5,"version":1,"chunks":[]}`, ReasonWrongType},
		{"empty document_key", []byte(""), `{"document_key":"","version":1,"chunks":[]}`, ReasonInvalidKey},
		{"long document_key", []byte(strings.Repeat("k", 513)), `{}`, ReasonInvalidKey},
		{"key mismatch", []byte("other"), `{"document_key":"d","version":1,"chunks":[]}`, ReasonKeyMismatch},
		{"missing version", []byte("d"), `{"document_key":"d","chunks":[]}`, ReasonMissingField},
		{"string version", []byte("d"), `{"document_key":"d","version":"1","chunks":[]}`, ReasonWrongType},
		{"bool version", []byte("d"), `{"document_key":"d","version":true,"chunks":[]}`, ReasonWrongType},
		{"zero version", []byte("d"), `{"document_key":"d","version":0,"chunks":[]}`, ReasonInvalidVersion},
		{"negative version", []byte("d"), `{"document_key":"d","version":-3,"chunks":[]}`, ReasonInvalidVersion},
		{"fractional version", []byte("d"), `{"document_key":"d","version":1.5,"chunks":[]}`, ReasonInvalidVersion},
		{"huge version", []byte("d"), `{"document_key":"d","version":99999999999999999999,"chunks":[]}`, ReasonInvalidVersion},
		{"bad op", []byte("d"), `{"document_key":"d","version":1,"op":"delete"}`, ReasonInvalidOp},
		{"number op", []byte("d"), `{"document_key":"d","version":1,"op":1}`, ReasonWrongType},
		{"no content", []byte("d"), `{"document_key":"d","version":1}`, ReasonMissingField},
		{"both content", []byte("d"), `{"document_key":"d","version":1,"text":"a","chunks":[]}`, ReasonAmbiguousBody},
		{"chunks not array", []byte("d"), `{"document_key":"d","version":1,"chunks":{}}`, ReasonWrongType},
		{"chunk not object", []byte("d"), `{"document_key":"d","version":1,"chunks":["a"]}`, ReasonWrongType},
		{"chunk without text", []byte("d"), `{"document_key":"d","version":1,"chunks":[{}]}`, ReasonMissingField},
		{"chunk text number", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":1}]}`, ReasonWrongType},
		{"too many chunks", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":"a"},{"text":"b"},{"text":"c"},{"text":"d"}]}`, ReasonTooManyChunks},
		{"text splits into too many", []byte("d"), `{"document_key":"d","version":1,"text":"` + strings.Repeat("word ", 20) + `"}`, ReasonTooManyChunks},
		{"vector dimension", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":"a","vector":[1,2,3]}]}`, ReasonVectorDimension},
		{"vector not numbers", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":"a","vector":["x","y"]}]}`, ReasonWrongType},
		{"vector overflow", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":"a","vector":[1,1e300]}]}`, ReasonInvalidVector},
		{"metadata array", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"metadata":[]}`, ReasonInvalidMetadata},
		{"metadata nested", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"metadata":{"a":{"b":1}}}`, ReasonInvalidMetadata},
		{"chunk metadata nested", []byte("d"), `{"document_key":"d","version":1,"chunks":[{"text":"a","metadata":{"a":[1]}}]}`, ReasonInvalidMetadata},
		{"title number", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"title":1}`, ReasonWrongType},
		{"nul in title", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"title":"a\u0000b"}`, ReasonNULCharacter},
		{"nul in text", []byte("d"), `{"document_key":"d","version":1,"text":"a\u0000b"}`, ReasonNULCharacter},
		{"nul in metadata", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"metadata":{"a":"\u0000"}}`, ReasonNULCharacter},
		{"invalid utf8 value", []byte("d"), "{\"document_key\":\"d\",\"version\":1,\"title\":\"\xff\",\"chunks\":[]}", ReasonInvalidUTF8},
		{"invalid utf8 key", []byte("\xff"), `{}`, ReasonInvalidUTF8},
		{"too large", []byte("d"), `{"document_key":"d","version":1,"text":"` + strings.Repeat("a", 5000) + `"}`, ReasonTooLarge},
		{"long correlation id", []byte("d"), `{"document_key":"d","version":1,"chunks":[],"correlation_id":"` + strings.Repeat("c", 300) + `"}`, ReasonWrongType},
	}
	d := testDecoder()
	covered := map[Reason]bool{}
	for _, tt := range tests {
		covered[tt.want] = true
	}
	for _, r := range Reasons() {
		if !covered[r] {
			t.Errorf("reason %s has no case here", r)
		}
	}
	if len(covered) != len(Reasons()) {
		t.Errorf("cases cover %d reasons, Reasons() lists %d; a reason is missing from the list", len(covered), len(Reasons()))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Decode(tt.key, []byte(tt.value), "")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode error = %v, want an *Error with reason %s", err, tt.want)
			}
			if e.Reason != tt.want {
				t.Errorf("reason = %s (%s), want %s", e.Reason, e.Detail, tt.want)
			}
			if e.Detail == "" {
				t.Errorf("detail is empty, want a reason a person can act on")
			}
		})
	}
}

func TestDecodeDoesNotEchoContent(t *testing.T) {
	// Details end up in dead-letter headers and logs; they must not carry the
	// document's text, which may be private.
	secret := "s3cr3t-content"
	d := testDecoder()
	_, err := d.Decode([]byte("d"), []byte(`{"document_key":"d","version":1,"text":"`+secret+`", "chunks":[]}`), "")
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error = %v, want an error that does not quote %q", err, secret)
	}
	_, err = d.Decode([]byte("d"), []byte(`{"document_key":"d","version":1,"text":"`+secret), "")
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error = %v, want an error that does not quote %q", err, secret)
	}
}

func TestDecodeValid(t *testing.T) {
	d := testDecoder()
	ev, err := d.Decode([]byte("doc:1"), []byte(`{
		"document_key": "doc:1", "version": 7, "title": "T", "source": "S",
		"metadata": {"lang": "en", "pages": 12, "score": 0.5, "ok": true, "none": null},
		"chunks": [{"text": "a", "vector": [0.25, -1]}, {"text": "b", "metadata": {"page": 2}}],
		"unknown_field": "ignored"
	}`), "from-header")
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if ev.Key != "doc:1" || ev.Version != 7 || ev.Op != keys.OpUpsert || ev.Tombstone {
		t.Errorf("identity = %q v%d %s tombstone=%v, want doc:1 v7 upsert", ev.Key, ev.Version, ev.Op, ev.Tombstone)
	}
	if ev.Title != "T" || ev.Source != "S" || ev.CorrelationID != "from-header" {
		t.Errorf("title, source, correlation = %q %q %q, want T S from-header", ev.Title, ev.Source, ev.CorrelationID)
	}
	if got := ev.Metadata["pages"]; got != int64(12) {
		t.Errorf("metadata pages = %#v, want int64(12)", got)
	}
	if got := ev.Metadata["score"]; got != 0.5 {
		t.Errorf("metadata score = %#v, want 0.5", got)
	}
	if len(ev.Chunks) != 2 || ev.Chunks[0].Vector[1] != -1 || ev.Chunks[1].Vector != nil || ev.Chunks[1].Metadata["page"] != int64(2) {
		t.Errorf("chunks = %+v, want two chunks, the first with vector [0.25 -1]", ev.Chunks)
	}
	if len(ev.ContentHash) != 64 {
		t.Errorf("content hash = %q, want 64 hex digits", ev.ContentHash)
	}
}

func TestDecodeCorrelationFieldWins(t *testing.T) {
	d := testDecoder()
	ev, err := d.Decode([]byte("d"), []byte(`{"document_key":"d","version":1,"chunks":[],"correlation_id":"field"}`), "header")
	if err != nil {
		t.Fatal(err)
	}
	if ev.CorrelationID != "field" {
		t.Errorf("correlation id = %q, want field", ev.CorrelationID)
	}
}

func TestDecodeWithdrawAndTombstone(t *testing.T) {
	d := testDecoder()
	ev, err := d.Decode([]byte("d"), []byte(`{"document_key":"d","version":4,"op":"withdraw"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Op != keys.OpWithdraw || ev.Version != 4 || ev.Tombstone {
		t.Errorf("withdraw = %s v%d tombstone=%v, want withdraw v4", ev.Op, ev.Version, ev.Tombstone)
	}
	ev, err = d.Decode([]byte("d"), nil, "c")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Op != keys.OpWithdraw || !ev.Tombstone || ev.Version != 0 || ev.CorrelationID != "c" {
		t.Errorf("tombstone = %+v, want a withdraw tombstone at version 0 with correlation c", ev)
	}
}

func TestContentHash(t *testing.T) {
	d := NewDecoder(Limits{MaxRecordBytes: 4096, MaxChunks: 100, VectorDim: 2}, Splitter{MaxBytes: 16})
	other := NewDecoder(Limits{MaxRecordBytes: 4096, MaxChunks: 100, VectorDim: 2}, Splitter{MaxBytes: 64})
	hash := func(d *Decoder, v string) string {
		t.Helper()
		ev, err := d.Decode([]byte("d"), []byte(v), "")
		if err != nil {
			t.Fatalf("Decode(%s): %v", v, err)
		}
		return ev.ContentHash
	}
	base := `{"document_key":"d","version":1,"title":"t","text":"hello world, this is a text"}`
	if hash(d, base) != hash(d, `{"title":"t","version":1,"document_key":"d","text":"hello world, this is a text","correlation_id":"x"}`) {
		t.Error("field order or correlation id changed the content hash")
	}
	if hash(d, base) != hash(other, base) {
		t.Error("the splitter setting changed the content hash; a replay after changing it would be a false conflict")
	}
	differs := []string{
		`{"document_key":"d","version":1,"title":"T","text":"hello world, this is a text"}`,
		`{"document_key":"d","version":1,"title":"t","text":"hello world, this is a text!"}`,
		`{"document_key":"d","version":1,"title":"t","chunks":[{"text":"hello world, this is a text"}]}`,
		`{"document_key":"d","version":1,"title":"t","text":"hello world, this is a text","metadata":{"a":1}}`,
	}
	for _, v := range differs {
		if hash(d, v) == hash(d, base) {
			t.Errorf("content hash of %s equals the base's, want different", v)
		}
	}
	if hash(d, `{"document_key":"d","version":1,"chunks":[],"metadata":{"a":1}}`) == hash(d, `{"document_key":"d","version":1,"chunks":[],"metadata":{"a":"1"}}`) {
		t.Error("metadata 1 and \"1\" hash alike, want different")
	}
}

// TestContentHashGolden pins the content hash of a few events: it is
// stored with every document and compared on every replay, so a change to
// its bytes would turn a replay of unchanged events into conflicts.
func TestContentHashGolden(t *testing.T) {
	d := NewDecoder(Limits{MaxRecordBytes: 1 << 20, MaxChunks: 100, VectorDim: 2}, Splitter{MaxBytes: 1024})
	for _, tc := range []struct{ event, want string }{
		{`{"document_key":"d","version":1,"title":"t","text":"hello world, this is a text"}`, "4c833c1525fd483d107582aa6beff8c25bb7ae7bc8f81bdcc51913b260ea26f2"},
		{`{"document_key":"d","version":2,"title":"t","source":"s","text":"ünïcödé","metadata":{"b":true,"a":1,"c":"x","d":null,"e":0.5,"f":false}}`, "013c9e4d51ad2434f8237e4cc449176d09433e6bc395a68583fa5d79a12783d9"},
		{`{"document_key":"d","version":1,"chunks":[{"text":"one","vector":[0.5,-1],"metadata":{"p":1}},{"text":"two","metadata":{}}]}`, "07c4f3d0e5f6f235c019122f8f4d2e269419354238245db6324143e42b5a9434"},
		{`{"document_key":"d","version":1,"chunks":[]}`, "5ceab3fc5a9b78a8bd8995b035e8b319ad7f5190d119db1bf055408ce67d833f"},
		{`{"document_key":"d","version":1,"text":"` + strings.Repeat("long text ", 2000) + `"}`, "8b511eb4a7a279b1f8623edde39646ff284e2a102a6b73e0fcfc3327180d7ace"},
	} {
		ev, err := d.Decode([]byte("d"), []byte(tc.event), "")
		if err != nil {
			t.Fatalf("Decode(%.60s): %v", tc.event, err)
		}
		if ev.ContentHash != tc.want {
			t.Errorf("content hash of %.60s = %s, want %s", tc.event, ev.ContentHash, tc.want)
		}
	}
}
