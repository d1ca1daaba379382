package project

import (
	"context"
	"fmt"
	"time"
)

// Tokens keeps the partitions' fencing tokens: the relational store.
type Tokens interface {
	// AcquireFence gives writer the partition's next token. When the
	// previous owner did not release the partition, its index writes may
	// land for lateFor more; late is how long from now an earlier owner's
	// index write may still land (0: none can).
	AcquireFence(ctx context.Context, topic string, partition int32, writer string, lateFor time.Duration) (f Fence, late time.Duration, err error)
	// ReleaseFence records that fence's writer has stopped writing the
	// partition with nothing on its way, so the next owner need not wait
	// for a late write of it. It does nothing once a newer writer holds
	// the partition.
	ReleaseFence(ctx context.Context, f Fence) error
}

// GraphFence is the graph's copy of each partition's newest token, which
// its write transactions check.
type GraphFence interface {
	// RaiseFence makes f's token the newest the graph knows for its
	// partition, unless a newer one is there (a *FencedError).
	RaiseFence(ctx context.Context, f Fence) error
}

// Fencing gives a member its claim on each partition assigned to it, for
// the consumer: a new token from the relational store, which the graph
// learns before the member's first batch, so that from then on both refuse
// every write of an earlier owner in their transactions. The index checks
// no token: Fence.LateUntil says until when a late write may land there.
type Fencing struct {
	tokens  Tokens
	graph   GraphFence
	writer  string
	lateFor time.Duration
	clock   Clock
	faults  Faults
}

// NewFencing returns the fencing of the member writer, whose index writes
// are bounded by indexWriteTimeout (Config.IndexWriteTimeout, the same on
// every member). clock and faults may be nil.
func NewFencing(tokens Tokens, graph GraphFence, writer string, indexWriteTimeout time.Duration, clock Clock, faults Faults) *Fencing {
	if clock == nil {
		clock = systemClock{}
	}
	if indexWriteTimeout <= 0 {
		indexWriteTimeout = DefaultIndexWriteTimeout
	}
	return &Fencing{tokens: tokens, graph: graph, writer: writer, lateFor: LateWindow(indexWriteTimeout), clock: clock, faults: faults}
}

// AcquireFence takes the partition's next token and raises the graph's to
// it.
func (f *Fencing) AcquireFence(ctx context.Context, topic string, partition int32) (Fence, error) {
	fence, late, err := f.tokens.AcquireFence(ctx, topic, partition, f.writer, f.lateFor)
	if err != nil {
		return Fence{}, err
	}
	if late > 0 {
		fence.LateUntil = f.clock.Now().Add(late)
	}
	if f.faults != nil {
		f.faults.At(ctx, "token")
	}
	if err := f.graph.RaiseFence(ctx, fence); err != nil {
		return Fence{}, fmt.Errorf("raise the graph's fencing token of %s/%d to %d: %w", topic, partition, fence.Token, err)
	}
	return fence, nil
}

// ReleaseFence gives up fence's partition after its writer's last write
// ended.
func (f *Fencing) ReleaseFence(ctx context.Context, fence Fence) error {
	return f.tokens.ReleaseFence(ctx, fence)
}
