package index

import (
	"testing"

	"github.com/projector/projector/internal/store/storetest"
)

func BenchmarkChunkIDs(b *testing.B) {
	storetest.BenchChunkIDs(b, openWith(b, Config{Dim: storetest.Dim}), "")
}
