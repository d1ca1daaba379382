package graph

import (
	"context"
	"fmt"
	"testing"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// BenchmarkChunkIDs is the graph's part of an id fence after a batch: the
// chunk ids of 400 documents of five chunks, read by key.
func BenchmarkChunkIDs(b *testing.B) {
	s, prefix := openTestWith(b, CreateNewVersions, false)
	ctx := context.Background()
	w := &project.Write{}
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sdoc-%d", prefix, i)
		w.Live = append(w.Live, storetest.Doc(keys[i], 1, "a", "b", "c", "d", "e"))
	}
	if err := s.Apply(ctx, w); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ids, err := s.ChunkIDs(ctx, keys)
		if err != nil || len(ids) != len(keys) {
			b.Fatalf("ChunkIDs: %d documents, %v", len(ids), err)
		}
	}
}
