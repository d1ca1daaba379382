package consume

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBehindWorkerHoldsOnlyItsPolls: while a partition's worker is behind,
// the consumer's memory is what it was handed (its polls of MaxPollRecords
// records), not what the client fetched. A fetch of well-compressed records
// decompresses to many times FetchMaxPartitionBytes; when the worker falls
// behind, its partition is paused and the client drops the records it
// buffered beyond the polls. Before, the polls were sub-slices of the
// fetched partition's record slice, so they kept every record of the fetch,
// and each fetch that followed, in memory: the backlog's peak resident size
// nearly doubled (docs/benchmarks.md, "Memory").
func TestBehindWorkerHoldsOnlyItsPolls(t *testing.T) {
	const (
		records   = 20_000
		valueSize = 4 << 10
		pollSize  = 100
	)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, testTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	// Small producer batches, so that a poll keeps little more than its own
	// records' batches; snappy, the producer's default, is spelled out
	// because the records' decompressed size is what this is about.
	producer, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic),
		kgo.ProducerBatchMaxBytes(64<<10), kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	value := bytes.Repeat([]byte("backlog text "), valueSize/len("backlog text "))
	batch := make([]*kgo.Record, 0, 1000)
	for i := range records {
		batch = append(batch, &kgo.Record{Key: []byte{byte(i), byte(i >> 8)}, Value: value})
		if len(batch) == cap(batch) || i == records-1 {
			if err := producer.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	c := &cluster{t: t, addrs: kc.ListenAddrs()}
	before := liveHeap()

	release := make(chan struct{})
	m := c.startWith("held", holdUntil(release), func(cfg *Config) {
		cfg.MaxPollRecords, cfg.BatchRecords, cfg.BatchesInFlight = pollSize, pollSize/2, 2
		cfg.FetchMaxBytes, cfg.FetchMaxPartitionBytes = 1<<20, 1<<20
	})
	defer close(release)
	// The worker holds its first poll and has the next in its inbox; its
	// partition is paused, and the client has dropped what it had
	// buffered of it.
	waitFor(t, "the partition paused behind its held worker, nothing buffered", func() bool {
		return mostPendingPolls(m.c) >= 2 && m.c.cl.BufferedFetchRecords() == 0
	})
	held := liveHeap() - before
	// Two polls of records, with the producer batches they start and end
	// in, and the client's own buffers of twice a compressed fetch: what
	// the configuration allows.
	bound := int64(2*pollSize*valueSize) + 4*(64<<10) + 2*(1<<20)
	t.Logf("live heap while the worker is behind: %.1f MiB (bound %.1f MiB)", float64(held)/(1<<20), float64(bound)/(1<<20))
	if held > bound {
		t.Errorf("the consumer holds %.1f MiB while its worker holds two polls of %d records of %d bytes, want at most %.1f MiB",
			float64(held)/(1<<20), pollSize, valueSize, float64(bound)/(1<<20))
	}
}

// liveHeap is the bytes of live heap objects, after a collection.
func liveHeap() int64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return int64(s.HeapAlloc)
}
