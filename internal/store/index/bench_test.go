package index

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// benchDoc is document n of a benchmark: chunks chunks of about 700
// bytes with 384-dimensional vectors, and its event's position.
func benchDoc(n, chunks int) project.Document {
	texts := make([]string, chunks)
	for i := range texts {
		texts[i] = strings.Repeat(fmt.Sprintf("chunk %d of benchmark document %d. ", i, n), 20)
	}
	d := storetest.Doc(fmt.Sprintf("tenant-7/report-%d", n), 42, texts...)
	d.Position = project.Position{Topic: "documents", Partition: 3, Offset: int64(123456 + n)}
	for i := range d.Chunks {
		d.Chunks[i].Vector = make([]float32, 384)
		for j := range d.Chunks[i].Vector {
			d.Chunks[i].Vector[j] = float32(j) / 384
		}
	}
	return d
}

// benchUpserts builds w's upsert calls as run does, cut by the default
// --qdrant-upsert-batch and --qdrant-upsert-max-bytes, each with its
// update_filter, and encodes them as gRPC sends them.
func benchUpserts(b *testing.B, w *project.Write) {
	s := &Store{cfg: Config{Collection: "chunks", UpsertBatch: 256, UpsertMaxBytes: DefaultUpsertMaxBytes}}
	b.ReportAllocs()
	for b.Loop() {
		var encodeErr error
		err := s.upsertCalls(w, func(call *qdrant.UpsertPoints) bool {
			_, encodeErr = proto.Marshal(call)
			return encodeErr == nil
		})
		if err = cmp.Or(err, encodeErr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpsertRequest is the projector's CPU for the upsert of one
// document of eight chunks. (Before upsertCalls it built the points alone,
// without the update_filter: its figures in docs/benchmarks.md are of
// that.)
func BenchmarkUpsertRequest(b *testing.B) {
	benchUpserts(b, &project.Write{Live: []project.Document{benchDoc(123, 8)}})
}

// BenchmarkUpsertCalls is the projector's CPU for the upserts of a batch
// as the service writes it: 100 documents of six chunks, three calls.
func BenchmarkUpsertCalls(b *testing.B) {
	w := &project.Write{}
	for n := range 100 {
		w.Live = append(w.Live, benchDoc(n, 6))
	}
	benchUpserts(b, w)
}
