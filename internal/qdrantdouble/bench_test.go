package qdrantdouble

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"
)

// The benchmarks call the services in-process, without gRPC: they measure the
// double's own work, which is what grows with the collection. Encoding a
// request costs the same whatever the collection holds.

// benchDocsPerBatch and benchChunksPerDoc shape a batch as the projector
// writes one: ~500 documents of two chunks each.
const (
	benchDocsPerBatch = 500
	benchChunksPerDoc = 2
	benchUpsertCall   = 256  // points per Upsert call, the projector's default
	benchScrollPage   = 2048 // the projector's scroll page
)

// drainBench is a collection kept at a fixed number of points while batches
// of new documents flow through it, as in the projector's end-to-end drains.
type drainBench struct {
	ctx     context.Context
	cols    *collectionsService
	points  *pointsService
	nextDoc int
	batches [][]*qdrant.PointId // ids of each batch in the collection, oldest first
}

func newDrainBench(b *testing.B, points int) *drainBench {
	b.Helper()
	s := newStore()
	d := &drainBench{ctx: b.Context(), cols: &collectionsService{store: s}, points: &pointsService{store: s}}
	_, err := d.cols.Create(d.ctx, &qdrant.CreateCollection{
		CollectionName: "chunks",
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 8, Distance: qdrant.Distance_Cosine}),
	})
	if err != nil {
		b.Fatalf("create collection: %v", err)
	}
	for field, typ := range map[string]qdrant.FieldType{"document_key": qdrant.FieldType_FieldTypeKeyword, "version": qdrant.FieldType_FieldTypeInteger} {
		_, err := d.points.CreateFieldIndex(d.ctx, &qdrant.CreateFieldIndexCollection{CollectionName: "chunks", FieldName: field, FieldType: &typ})
		if err != nil {
			b.Fatalf("create index %s: %v", field, err)
		}
	}
	for range points / (benchDocsPerBatch * benchChunksPerDoc) {
		d.write(b)
	}
	return d
}

// write upserts a batch of new documents, then deletes every other point of
// those documents, as the projector's index store does; it returns the keys.
func (d *drainBench) write(b *testing.B) []string {
	b.Helper()
	keys := make([]string, benchDocsPerBatch)
	var points []*qdrant.PointStruct
	var ids []*qdrant.PointId
	for i := range keys {
		keys[i] = fmt.Sprintf("doc-%d", d.nextDoc)
		d.nextDoc++
		for ordinal := range benchChunksPerDoc {
			id := qdrant.NewIDUUID(uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s:1:%d", keys[i], ordinal)).String())
			ids = append(ids, id)
			points = append(points, &qdrant.PointStruct{
				Id:      id,
				Vectors: qdrant.NewVectorsDense([]float32{1, 2, 3, 4, 5, 6, 7, 8}),
				Payload: qdrant.NewValueMap(map[string]any{
					"document_key": keys[i], "version": 1, "ordinal": ordinal, "text": "a chunk of text", "title": "a title",
				}),
			})
		}
	}
	for len(points) > 0 {
		n := min(benchUpsertCall, len(points))
		_, err := d.points.Upsert(d.ctx, &qdrant.UpsertPoints{CollectionName: "chunks", Wait: qdrant.PtrOf(true), Points: points[:n]})
		if err != nil {
			b.Fatalf("upsert: %v", err)
		}
		points = points[n:]
	}
	_, err := d.points.Delete(d.ctx, &qdrant.DeletePoints{
		CollectionName: "chunks", Wait: qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelectorFilter(&qdrant.Filter{
			Must:    []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)},
			MustNot: []*qdrant.Condition{qdrant.NewHasID(ids...)},
		}),
	})
	if err != nil {
		b.Fatalf("delete: %v", err)
	}
	d.batches = append(d.batches, ids)
	return keys
}

// trim deletes the oldest batch by id, which keeps the collection's size.
func (d *drainBench) trim(b *testing.B) {
	b.Helper()
	_, err := d.points.Delete(d.ctx, &qdrant.DeletePoints{
		CollectionName: "chunks", Wait: qdrant.PtrOf(true), Points: qdrant.NewPointsSelector(d.batches[0]...),
	})
	if err != nil {
		b.Fatalf("trim: %v", err)
	}
	d.batches = d.batches[1:]
}

// fenceScroll reads the batch back with filtered scrolls, page by page, and
// returns how many points it saw.
func (d *drainBench) fenceScroll(b *testing.B, keys []string) int {
	b.Helper()
	filter := &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}
	return d.scroll(b, filter, "document_key")
}

// fenceFacet reads the batch back with one exact facet and returns how many
// points it counted.
func (d *drainBench) fenceFacet(b *testing.B, keys []string) int {
	b.Helper()
	resp, err := d.points.Facet(d.ctx, &qdrant.FacetCounts{
		CollectionName: "chunks", Key: "document_key", Exact: qdrant.PtrOf(true),
		Filter: &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}},
		Limit:  qdrant.PtrOf(uint64(len(keys))),
	})
	if err != nil {
		b.Fatalf("facet: %v", err)
	}
	n := 0
	for _, h := range resp.GetHits() {
		n += int(h.GetCount())
	}
	return n
}

// scroll pages through the points that pass filter with the given payload
// fields and returns how many there were.
func (d *drainBench) scroll(b *testing.B, filter *qdrant.Filter, fields ...string) int {
	b.Helper()
	n := 0
	var offset *qdrant.PointId
	for {
		resp, err := d.points.Scroll(d.ctx, &qdrant.ScrollPoints{
			CollectionName: "chunks", Filter: filter, Offset: offset, Limit: qdrant.PtrOf(uint32(benchScrollPage)),
			WithPayload: qdrant.NewWithPayloadInclude(fields...), WithVectors: qdrant.NewWithVectors(false),
		})
		if err != nil {
			b.Fatalf("scroll: %v", err)
		}
		n += len(resp.GetResult())
		if resp.NextPageOffset == nil {
			return n
		}
		offset = resp.NextPageOffset
	}
}

var benchSizes = []int{20_000, 100_000}

// BenchmarkDrainBatch is the projector's work per batch in an end-to-end
// drain: upsert 1000 points of 500 new documents in calls of 256, delete the
// documents' other points by filter (match-any on the keys, must_not has_id
// the batch), then fence by reading the batch back (a filtered scroll, or an
// exact facet). One op is one batch; the collection stays at N points. The
// cost per batch must not grow with N.
func BenchmarkDrainBatch(b *testing.B) {
	for _, n := range benchSizes {
		for _, fence := range []string{"scroll", "facet"} {
			b.Run(fmt.Sprintf("points=%d/fence=%s", n, fence), func(b *testing.B) {
				d := newDrainBench(b, n)
				read := d.fenceScroll
				if fence == "facet" {
					read = d.fenceFacet
				}
				for b.Loop() {
					keys := d.write(b)
					if got, want := read(b, keys), benchDocsPerBatch*benchChunksPerDoc; got != want {
						b.Fatalf("fence saw %d points, want %d", got, want)
					}
					b.StopTimer()
					d.trim(b)
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkReconcileScan is reconcile's scan of a whole collection: unfiltered
// scroll pages of 2048 with document_key and version, one page an op, from
// where the last one ended (and from the start after the last page). With
// writes=batch every page is followed by a drained batch: a scan that runs
// while the projector writes, the case that decides how the id order is kept.
func BenchmarkReconcileScan(b *testing.B) {
	for _, n := range benchSizes {
		for _, writes := range []string{"none", "batch"} {
			b.Run(fmt.Sprintf("points=%d/writes=%s", n, writes), func(b *testing.B) {
				d := newDrainBench(b, n)
				var offset *qdrant.PointId
				for b.Loop() {
					resp, err := d.points.Scroll(d.ctx, &qdrant.ScrollPoints{
						CollectionName: "chunks", Offset: offset, Limit: qdrant.PtrOf(uint32(benchScrollPage)),
						WithPayload: qdrant.NewWithPayloadInclude("document_key", "version"), WithVectors: qdrant.NewWithVectors(false),
					})
					if err != nil {
						b.Fatalf("scroll: %v", err)
					}
					if len(resp.GetResult()) == 0 {
						b.Fatal("scroll returned an empty page")
					}
					offset = resp.NextPageOffset
					if writes == "batch" {
						d.write(b)
						b.StopTimer()
						d.trim(b)
						b.StartTimer()
					}
				}
			})
		}
	}
}
