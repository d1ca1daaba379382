package event

import (
	"strings"
	"testing"
)

func benchDecoder() *Decoder {
	return NewDecoder(DefaultLimits(), Splitter{MaxBytes: DefaultChunkBytes})
}

// chunksEvent is an event of eight chunks of 840 bytes, with metadata.
func chunksEvent() []byte {
	var sb strings.Builder
	sb.WriteString(`{"document_key":"tenant-7/report-123","version":42,"title":"Quarterly report","source":"wiki","metadata":{"lang":"en","pages":12},"chunks":[`)
	for i := 0; i < 8; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"text":"` + strings.Repeat("Lorem ipsum dolor sit amet. ", 30) + `","metadata":{"page":` + string(rune('1'+i)) + `}}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

func BenchmarkDecodeChunks(b *testing.B) {
	value := chunksEvent()
	d := benchDecoder()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode([]byte("tenant-7/report-123"), value, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeText(b *testing.B) {
	value := []byte(`{"document_key":"k","version":1,"text":"` + strings.Repeat("Lorem ipsum dolor sit amet, consectetur. ", 300) + `"}`)
	d := benchDecoder()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode([]byte("k"), value, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSplit(b *testing.B) {
	text := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n", 400)
	s := Splitter{MaxBytes: DefaultChunkBytes}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Split(text)
	}
}

// BenchmarkDecodeChunksReference is BenchmarkDecodeChunks through the
// reference decoding alone (encoding/json), which the one-pass decoding
// replaced for the events it takes: run both in one sitting to compare.
func BenchmarkDecodeChunksReference(b *testing.B) {
	value := chunksEvent()
	d := benchDecoder()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.decodeJSON("tenant-7/report-123", value, ""); err != nil {
			b.Fatal(err)
		}
	}
}
