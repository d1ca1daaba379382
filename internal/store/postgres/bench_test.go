package postgres

import (
	"fmt"
	"testing"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// BenchmarkColumns builds the unnest() columns of a write of 50 documents
// of eight chunks with 384-dimensional vectors, the per-chunk work of
// Apply before the round trip.
func BenchmarkColumns(b *testing.B) {
	w := &project.Write{}
	emb := embed.NewHashing(384)
	for i := range 50 {
		texts := make([]string, 8)
		for j := range texts {
			texts[j] = fmt.Sprintf("chunk %d of document %d, a sentence or two of text", j, i)
		}
		d := storetest.Doc(fmt.Sprintf("tenant-7/report-%03d", i), 3, texts...)
		vecs, _ := emb.Embed(b.Context(), texts)
		for j := range d.Chunks {
			d.Chunks[j].Vector = vecs[j]
		}
		w.Live = append(w.Live, d)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := columnsOf(w); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChunkIDs(b *testing.B) {
	storetest.BenchChunkIDs(b, relationalUnderTest{openTest(b)}, "")
}
