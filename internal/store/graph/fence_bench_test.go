package graph

import (
	"testing"

	"github.com/projector/projector/internal/store/storetest"
)

func BenchmarkChunkIDs(b *testing.B) {
	s, prefix := openTestWith(b, CreateNewVersions, false)
	storetest.BenchChunkIDs(b, s, prefix)
}
