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

// upsertRequest is the upsert of d's points as Apply builds it, in one
// call, for BenchmarkUpsertRequest.
func (s *Store) upsertRequest(d *project.Document) (*qdrant.UpsertPoints, error) {
	wire, err := newDocumentWire(d)
	if err != nil {
		return nil, err
	}
	points := make([]byte, 0, estimatedPointBytes(&project.Write{Live: []project.Document{*d}}))
	for i := range d.Chunks {
		start := len(points)
		if points, err = wire.appendPoint(points, &d.Chunks[i]); err != nil {
			return nil, err
		}
		if err := s.checkPointSize(len(points)-start, &d.Chunks[i], 0); err != nil {
			return nil, err
		}
	}
	call := &qdrant.UpsertPoints{CollectionName: s.cfg.Collection, Wait: qdrant.PtrOf(true)}
	call.ProtoReflect().SetUnknown(points)
	return call, nil
}

// BenchmarkUpsertRequest is the projector's CPU for the upsert of a
// document of eight chunks of 700 bytes with 384-dimensional vectors: the
// points built, sized against --qdrant-upsert-max-bytes, and the request
// encoded as gRPC sends it.
func BenchmarkUpsertRequest(b *testing.B) {
	texts := make([]string, 8)
	for i := range texts {
		texts[i] = strings.Repeat(fmt.Sprintf("chunk %d of the benchmark document. ", i), 20)
	}
	d := storetest.Doc("tenant-7/report-123", 42, texts...)
	d.Position = project.Position{Topic: "documents", Partition: 3, Offset: 123456}
	for i := range d.Chunks {
		d.Chunks[i].Vector = make([]float32, 384)
		for j := range d.Chunks[i].Vector {
			d.Chunks[i].Vector[j] = float32(j) / 384
		}
	}
	s := &Store{cfg: Config{Collection: "chunks", UpsertMaxBytes: DefaultUpsertMaxBytes}}
	b.ReportAllocs()
	for b.Loop() {
		call, err := s.upsertRequest(&d)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := proto.Marshal(call); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpsertCalls is the projector's CPU for the upserts of a batch
// as the service writes it: 100 documents of six chunks of 700 bytes with
// 384-dimensional vectors and their event positions, cut into calls of
// the default --qdrant-upsert-batch, each with its update_filter, and
// encoded as gRPC sends them.
func BenchmarkUpsertCalls(b *testing.B) {
	w := &project.Write{}
	for n := range 100 {
		texts := make([]string, 6)
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
		w.Live = append(w.Live, d)
	}
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
