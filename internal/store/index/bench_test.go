package index

import (
	"fmt"
	"testing"

	"github.com/projector/projector/internal/store/storetest"
)

// BenchmarkPoints builds the points of a document of eight chunks, the
// per-chunk work of Apply before the upsert call.
func BenchmarkPoints(b *testing.B) {
	texts := make([]string, 8)
	for i := range texts {
		texts[i] = fmt.Sprintf("chunk %d of the benchmark document, a sentence or two of text", i)
	}
	d := storetest.Doc("tenant-7/report-123", 42, texts...)
	b.ReportAllocs()
	for b.Loop() {
		shared, err := newDocumentPayload(&d)
		if err != nil {
			b.Fatal(err)
		}
		for i := range d.Chunks {
			if _, err := shared.point(&d.Chunks[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
