package event

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func texts(chunks []Chunk) []string {
	var out []string
	for _, c := range chunks {
		out = append(out, c.Text)
	}
	return out
}

func TestSplitGolden(t *testing.T) {
	tests := []struct {
		name string
		max  int
		text string
		want []string
	}{
		{"empty", 20, "", nil},
		{"only space", 20, " \n\t ", nil},
		{"fits", 20, "  short text \n", []string{"short text"}},
		{"paragraph", 20, "first para.\n\nsecond para here", []string{"first para.", "second para here"}},
		{"line", 20, "one line of text\nnext one", []string{"one line of text", "next one"}},
		{"sentence", 20, "It is. It was here yes", []string{"It is. It was here", "yes"}},
		{"space", 20, "aaaa bbbb cccc dddd eeee", []string{"aaaa bbbb cccc dddd", "eeee"}},
		{"hard cut", 16, strings.Repeat("x", 40), []string{strings.Repeat("x", 16), strings.Repeat("x", 16), strings.Repeat("x", 8)}},
		{"break in first half ignored", 20, "ab\n\ncdefghij klmnopqrstuvwxyz", []string{"ab\n\ncdefghij", "klmnopqrstuvwxyz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := texts(Splitter{MaxBytes: tt.max}.Split(tt.text))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Split(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

func TestSplitNeverBreaksACharacter(t *testing.T) {
	text := strings.Repeat("ß€𝄞", 50)
	for _, c := range (Splitter{MaxBytes: 17}).Split(text) {
		if !utf8.ValidString(c.Text) || len(c.Text) > 17 || c.Text == "" {
			t.Fatalf("chunk %q: valid=%v len=%d, want valid UTF-8 of 1..17 bytes", c.Text, utf8.ValidString(c.Text), len(c.Text))
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add("hello world. this is text\n\nand more", 16)
	f.Add(strings.Repeat("ß€𝄞 ", 30), 20)
	f.Fuzz(func(t *testing.T, text string, max int) {
		if !utf8.ValidString(text) {
			t.Skip()
		}
		if max > 4096 {
			max = 4096
		}
		s := Splitter{MaxBytes: max}
		limit := max
		if limit < 16 {
			limit = 16
		}
		chunks := s.Split(text)
		var kept strings.Builder
		for _, c := range chunks {
			if c.Text == "" || len(c.Text) > limit || !utf8.ValidString(c.Text) {
				t.Fatalf("chunk %q: want valid UTF-8 of 1..%d bytes", c.Text, limit)
			}
			kept.WriteString(c.Text)
		}
		// Only whitespace may be dropped.
		strip := func(s string) string {
			return strings.Map(func(r rune) rune {
				if r < utf8.RuneSelf && isSpace(byte(r)) {
					return -1
				}
				return r
			}, s)
		}
		if strip(kept.String()) != strip(text) {
			t.Fatalf("chunks lost text: got %q, want %q", strip(kept.String()), strip(text))
		}
		if again := s.Split(text); !reflect.DeepEqual(texts(again), texts(chunks)) {
			t.Fatalf("second split differs")
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":1,"text":"hello"}`))
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":2,"chunks":[{"text":"a","vector":[1,2]}],"metadata":{"k":1.5}}`))
	f.Add([]byte("d"), []byte(`{"document_key":"d","version":1,"op":"withdraw"}`))
	f.Add([]byte("x'}) DETACH DELETE n //"), []byte(`{"document_key":"x'}) DETACH DELETE n //","version":1,"title":"'; DROP TABLE chunks; --","text":"\\"}`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		d := NewDecoder(Limits{MaxRecordBytes: 1 << 16, MaxChunks: 50, VectorDim: 2}, Splitter{MaxBytes: 32})
		ev, err := d.Decode(key, value, "")
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Reason == "" {
				t.Fatalf("error %v is not an *Error with a reason", err)
			}
			return
		}
		if ev.Key != string(key) || (ev.Version < 1 && !ev.Tombstone) || len(ev.Chunks) > 50 {
			t.Fatalf("accepted an invalid event: %+v", ev)
		}
		for _, c := range ev.Chunks {
			if c.Vector != nil && len(c.Vector) != 2 {
				t.Fatalf("accepted vector of dimension %d", len(c.Vector))
			}
		}
	})
}
