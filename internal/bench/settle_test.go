package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/qdrant/go-client/qdrant"

	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/testenv"
)

// TestSettleIndexWaitsForTheOptimizer writes a collection past the
// server's default indexing threshold (10 MB of vectors: 8,000 of 384
// dimensions), so the server builds its HNSW index after the writes:
// settleIndex returns only once the collection is green and its vectors
// indexed, the state a measurement's CPU must be read in. qdrant-engine
// reads green until its optimizer starts on the collection, which a single
// green right after the writes took for optimized. The engine is the
// test's own, so that no other test's collection keeps its optimizer busy,
// as between a bench's measurements.
func TestSettleIndexWaitsForTheOptimizer(t *testing.T) {
	ctx := context.Background()
	collection := fmt.Sprintf("bench_settle_%d", time.Now().UnixNano())
	const dim, points = 384, 8000
	idx, err := index.Open(index.Config{Addr: testenv.StartQdrant(t).Addr(), Collection: collection, Dim: dim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = idx.Client().DeleteCollection(context.Background(), collection)
		_ = idx.Close()
	})
	cl := idx.Client()
	err = cl.CreateCollection(ctx, &qdrant.CreateCollection{
		CollectionName: collection,
		VectorsConfig:  qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: dim, Distance: qdrant.Distance_Cosine}),
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for start := 0; start < points; start += 500 {
		batch := make([]*qdrant.PointStruct, 0, 500)
		for range 500 {
			v := make([]float32, dim)
			for j := range v {
				v[j] = rng.Float32() - 0.5
			}
			batch = append(batch, &qdrant.PointStruct{Id: qdrant.NewID(uuid.NewString()), Vectors: qdrant.NewVectorsDense(v)})
		}
		if _, err := cl.Upsert(ctx, &qdrant.UpsertPoints{CollectionName: collection, Points: batch, Wait: qdrant.PtrOf(true)}); err != nil {
			t.Fatal(err)
		}
	}
	b := &bench{cfg: Config{IndexSettle: 2 * time.Minute}}
	waited, err := b.settleIndex(ctx, &Stores{Index: idx}, collection)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cl.GetCollectionInfo(ctx, collection)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetStatus() != qdrant.CollectionStatus_Green || info.GetIndexedVectorsCount() == 0 {
		t.Errorf("after settleIndex (%s): status %s, %d vectors indexed; want green and the vectors indexed",
			waited, info.GetStatus(), info.GetIndexedVectorsCount())
	}
	t.Logf("waited %s for %d vectors to be indexed", waited.Round(time.Millisecond), info.GetIndexedVectorsCount())
}
