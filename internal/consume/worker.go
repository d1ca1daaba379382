package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/retry"
)

// commitTimeout bounds one offset commit; a commit that times out is
// logged and the records are redelivered after a restart or rebalance.
const commitTimeout = 10 * time.Second

// worker handles one partition. Its goroutine is started by assigned and
// stopped by closing quit; done is closed when it has returned. cancel ends
// the context of its Handle and commit calls: stopWorkers calls it at once
// for a lost partition, and for a revoked one whose batch outlasts
// RevokeTimeout. Once that context has ended nothing more is committed.
type worker struct {
	c *Consumer
	// cl is the client whose group assigned the partition, as the
	// callback gave it: franz-go joins the group as soon as the client
	// exists, so the first assignment can come before New has stored
	// the client in c.
	cl        *kgo.Client
	topic     string
	partition int32
	// ready tells the worker that the poll loop put a poll in its inbox.
	ready  chan struct{}
	quit   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	log    *zap.Logger
	// halted is set when the partition halts; the poll loop then drops the
	// partition's records instead of handing them over.
	halted atomic.Bool
	// resume takes the poll loop's request to resume a halted partition;
	// the halt loop closes the channel it is sent once it has resumed.
	resume chan chan struct{}

	// mu guards inbox, throttled, pending, next and highWatermark, read by
	// the metrics scrape and written by the poll loop and the worker.
	mu sync.Mutex
	// inbox holds the polls handed over and not yet taken by the worker.
	// The poll loop never waits for a worker, or the group's rebalance
	// callbacks could not run (kgo.BlockRebalanceOnPoll): once the inbox
	// holds more than queueSize polls it pauses fetching the partition
	// (throttled), and the worker resumes it when it has taken them. That
	// bounds the records a partition holds as a queue of queueSize polls
	// beside the one being handled would.
	inbox     []polled
	throttled bool
	// pending holds the receive times of queued and in-flight batches.
	pending       []time.Time
	next          int64 // next offset to commit; -1 until known
	highWatermark int64
	// haltReason and haltCause say why the partition is halted, "" when
	// it is not.
	haltReason, haltCause string
	// backlogSince is when the partition was found, at its assignment, to
	// have records this member has not received yet; zero once its first
	// records arrived, or when it had none. The records of such a backlog
	// are uncommitted from then on: a client wedged before its first fetch
	// shows in their age.
	backlogSince time.Time
}

type polled struct {
	topicID  project.TopicID
	recs     []*kgo.Record
	received time.Time
}

// newWorker returns the worker of a partition and the context its run
// must be given, which its cancel ends.
func newWorker(c *Consumer, cl *kgo.Client, topic string, partition int32) (*worker, context.Context) {
	ctx, cancel := context.WithCancel(c.workCtx)
	return &worker{
		c: c, cl: cl, topic: topic, partition: partition, cancel: cancel,
		ready:  make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		resume: make(chan chan struct{}),
		log:    c.log.With(zap.String("topic", topic), zap.Int32("partition", partition)),
		next:   -1,
	}, ctx
}

// queueSize is how many polls a worker's inbox holds before fetching its
// partition is paused. With more than one batch in flight the worker takes
// the next poll as soon as it can start a batch of it, so it holds that poll
// itself and the inbox has no room: the records held stay as many as with
// one batch in flight.
func queueSize(batchesInFlight int) int {
	if batchesInFlight > 1 {
		return 0
	}
	return 1
}

// enqueue hands a poll's records to the worker without waiting. When the
// worker is behind, fetching the partition is paused until it catches up:
// that back-pressure bounds memory by configuration, not by the backlog,
// while the poll loop goes on serving the other partitions and the group.
func (w *worker) enqueue(topicID project.TopicID, recs []*kgo.Record, highWatermark int64) {
	if w.halted.Load() {
		return // left uncommitted; fetching the partition is paused
	}
	// recs is a sub-slice of the client's records of the whole fetched
	// partition, which the client drops once the partition is paused: a
	// copy keeps only this poll's records, and the batches they were
	// decompressed into, in memory, not every record of the fetch.
	p := polled{topicID: topicID, recs: slices.Clone(recs), received: time.Now()}
	w.mu.Lock()
	w.pending = append(w.pending, p.received)
	w.backlogSince = time.Time{}
	if w.next < 0 {
		w.next = recs[0].Offset
	}
	w.highWatermark = highWatermark
	w.inbox = append(w.inbox, p)
	if len(w.inbox) > queueSize(w.c.cfg.BatchesInFlight) && !w.throttled {
		w.throttled = true
		w.cl.PauseFetchPartitions(map[string][]int32{w.topic: {w.partition}})
	}
	w.mu.Unlock()
	w.updateLag()
	w.signal()
}

// signal wakes the worker to look at its inbox.
func (w *worker) signal() {
	select {
	case w.ready <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// take removes the oldest poll of the inbox, and resumes fetching the
// partition once the inbox has room again. ok is false when it is empty.
func (w *worker) take() (p polled, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.inbox) == 0 {
		return polled{}, false
	}
	p, w.inbox = w.inbox[0], w.inbox[1:]
	if len(w.inbox) > 0 {
		w.signal()
	}
	if w.throttled && len(w.inbox) <= queueSize(w.c.cfg.BatchesInFlight) {
		w.throttled = false
		w.cl.ResumeFetchPartitions(map[string][]int32{w.topic: {w.partition}})
	}
	return p, true
}

// dropInbox discards the polls not taken yet, uncommitted: the partition
// halted, and fetching starts again at its first uncommitted record.
func (w *worker) dropInbox() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inbox = nil
	w.throttled = false
}

// batch is the part of one poll that one Handle call takes.
type batch struct {
	topicID project.TopicID
	recs    []*kgo.Record
	// endsPoll marks a poll's last batch: once it is committed, the poll
	// is no longer pending.
	endsPoll bool
}

// flight is a batch whose Handle call is running in a goroutine of its
// own. The worker's run owns it: it waits for done on every path out.
type flight struct {
	batch
	keys   map[string]struct{}
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// run handles the partition's batches in offset order, up to
// BatchesInFlight of them at once, and commits each only after it and
// every batch before it are done. Two batches are in flight together only
// when no record key (the document key) is in both, so every document's
// events are still handled one batch after the other, in log order: a
// batch's reads of the stored states see every earlier batch of its
// documents committed, and the three stores are written in their order
// for each document. What the batches in flight share is only the stores'
// time: while one waits on a graph commit, the next can write the index.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	defer w.cancel()
	w.seedLag(ctx)
	fence, ok := w.acquireFence(ctx)
	if !ok {
		return
	}
	var (
		backlog  []batch
		inflight []*flight
		// cut is set once a batch or the settle was cancelled before it
		// ended: a write of it may still be on its way, so the partition
		// is not released.
		cut bool
	)
	// The settle is due once no index write of an earlier owner can land
	// (fence.LateUntil; at once when none can): no batch starts from then
	// until it has run, so that nothing else writes the documents it
	// compares.
	settleTimer := time.NewTimer(time.Until(fence.LateUntil))
	defer settleTimer.Stop()
	due := settleTimer.C
	var settleDue bool
	var settling *flight
	quit := w.quit
	for {
		for !settleDue && quit != nil && len(backlog) > 0 && len(inflight) < w.c.cfg.BatchesInFlight && disjoint(backlog[0].recs, inflight) {
			inflight = append(inflight, w.start(ctx, fence, backlog[0]))
			backlog = backlog[1:]
		}
		if settleDue && settling == nil && len(inflight) == 0 && quit != nil {
			settling = w.settle(ctx, fence)
		}
		if quit == nil && len(inflight) == 0 && settling == nil {
			if !cut && ctx.Err() == nil {
				w.release(fence)
			}
			return
		}
		var ready <-chan struct{}
		if quit != nil && !settleDue && len(backlog) == 0 && len(inflight) < w.c.cfg.BatchesInFlight {
			ready = w.ready
		}
		var oldest, settled <-chan struct{}
		if len(inflight) > 0 {
			oldest = inflight[0].done
		}
		if settling != nil {
			settled = settling.done
		}
		select {
		case <-quit:
			// Revoked: the batches in flight may finish and commit (within
			// RevokeTimeout); the rest is left uncommitted for the
			// partition's next owner, and so is the settle, whose
			// documents stay recorded for it.
			quit, backlog = nil, nil
			if settling != nil {
				settling.cancel()
				cut = true
			}
		case <-due:
			due, settleDue = nil, true
		case <-settled:
			s := settling
			settling = nil
			if quit == nil || ctx.Err() != nil {
				continue
			}
			if s.err != nil {
				// Settled again once the partition is resumed.
				inflight, backlog = nil, nil
				if _, fenced := errors.AsType[*project.FencedError](s.err); fenced {
					s.err = &project.HaltError{Reason: project.HaltFenced, Err: s.err}
				}
				if !w.halt(s.err) {
					return
				}
				continue
			}
			settleDue = false
		case <-ready:
			if p, ok := w.take(); ok {
				backlog = w.split(p)
			}
		case <-oldest:
			f := inflight[0]
			inflight = inflight[1:]
			if ctx.Err() != nil {
				// Revoked past RevokeTimeout, lost, or the shutdown timeout
				// passed: whatever Handle says, the partition may be
				// another member's by now, so nothing is committed.
				w.log.Info("batch abandoned uncommitted: the partition was revoked or lost, or the service is stopping",
					zap.Int64("offset", f.recs[0].Offset), zap.Int("records", len(f.recs)))
				land(inflight)
				return
			}
			if f.err != nil {
				// The later batches must not be committed past this one:
				// they are cancelled, and fetching starts again at this
				// batch's first record once the partition is resumed.
				cut = cut || len(inflight) > 0
				land(inflight)
				inflight, backlog = nil, nil
				if !w.halt(f.err) {
					return
				}
				continue
			}
			w.commit(ctx, f.recs[len(f.recs)-1])
			if f.endsPoll {
				w.popPending()
			}
		}
	}
}

// settle runs the partition's settle in a goroutine of its own, which run
// owns like a batch's.
func (w *worker) settle(ctx context.Context, fence project.Fence) *flight {
	ctx, cancel := context.WithCancel(ctx)
	f := &flight{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer cancel()
		f.err = w.c.handler.Settle(ctx, fence)
	}()
	return f
}

// releaseTimeout bounds the release of a partition's token.
const releaseTimeout = 2 * time.Second

// release tells the partition's next owner that this member stopped
// writing it with nothing on its way, so it need not wait out a late index
// write; a release that fails only makes it wait.
func (w *worker) release(fence project.Fence) {
	if w.c.fences == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := w.c.fences.ReleaseFence(ctx, fence); err != nil {
		w.log.Warn("cannot release the partition's fencing token; its next owner waits out the late window", zap.Error(err))
	}
}

// split cuts a poll into batches of BatchRecords.
func (w *worker) split(p polled) []batch {
	var out []batch
	for recs := p.recs; len(recs) > 0; {
		n := min(len(recs), w.c.cfg.BatchRecords)
		out = append(out, batch{topicID: p.topicID, recs: recs[:n], endsPoll: n == len(recs)})
		recs = recs[n:]
	}
	return out
}

// seedTimeout bounds the reads of seedLag.
const seedTimeout = 10 * time.Second

// seedLag reads the partition's committed offset (or, with none, its first
// offset, where a new group starts) and its end from the brokers, once the
// partition is assigned: its lag and the age of its backlog are then known
// before its first records arrive, and a client that never fetches them
// shows. A read that fails leaves them to the first records and the lag
// refresh.
func (w *worker) seedLag(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
	adm := kadm.NewClient(w.cl)
	ends, err := adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		return
	}
	end, ok := ends.Lookup(w.topic, w.partition)
	if !ok || end.Err != nil {
		return
	}
	w.c.lagRead.Store(time.Now().UnixNano())
	at := int64(-1)
	if committed, err := adm.FetchOffsetsForTopics(ctx, w.c.cfg.Group, w.topic); err == nil {
		if o, ok := committed.Lookup(w.topic, w.partition); ok && o.Err == nil && o.At >= 0 {
			at = o.At
		}
	}
	if at < 0 {
		starts, err := adm.ListStartOffsets(ctx, w.topic)
		if err != nil {
			return
		}
		start, ok := starts.Lookup(w.topic, w.partition)
		if !ok || start.Err != nil {
			return
		}
		at = start.Offset
	}
	w.mu.Lock()
	if w.next < 0 {
		w.next = at
	}
	w.highWatermark = max(w.highWatermark, end.Offset)
	if w.highWatermark > w.next && len(w.pending) == 0 {
		w.backlogSince = time.Now()
	}
	w.mu.Unlock()
	w.updateLag()
}

// acquireFence takes the member's claim on the partition before its first
// batch, retrying while the store that keeps the tokens fails. Each attempt
// is bounded by FenceTimeout: the token waits for the partition's earlier
// writer, and one stopped inside its transaction holds the partition until
// the store ends its session (the store's lock timeout usually ends the
// attempt first). A timed-out attempt is counted and retried. It reports
// false when the partition was revoked or the service stops first.
func (w *worker) acquireFence(ctx context.Context) (project.Fence, bool) {
	if w.c.fences == nil {
		return project.Fence{}, true
	}
	component := "partition " + w.topic + "/" + strconv.Itoa(int(w.partition))
	policy := retry.Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, w.c.cfg.FenceTimeout)
		fence, err := w.c.fences.AcquireFence(actx, w.topic, w.partition)
		cancel()
		if err == nil {
			if attempt > 0 {
				w.c.health.Recover(component)
			}
			w.log.Info("partition fenced for this member", zap.Int64("token", fence.Token))
			return fence, true
		}
		if ctx.Err() == nil && (errors.Is(err, project.ErrLockTimeout) || errors.Is(err, context.DeadlineExceeded)) {
			w.c.m.fenceTimeouts.Inc()
			err = fmt.Errorf("timed out: an earlier writer still holds the partition (one stopped inside its transaction holds it until the store ends its session): %w", err)
		}
		if w.c.health.Fail(component, "cannot take the fencing token: "+err.Error()) {
			w.log.Warn("cannot take the partition's fencing token; retrying", zap.Error(err))
		}
		select {
		case <-w.quit:
			w.c.health.Recover(component)
			return project.Fence{}, false
		case <-ctx.Done():
			w.c.health.Recover(component)
			return project.Fence{}, false
		case <-time.After(policy.Delay(attempt)):
		}
	}
}

// start runs b's Handle call in a goroutine, under a context of its own so
// that it can be cancelled alone when an earlier batch fails.
func (w *worker) start(ctx context.Context, fence project.Fence, b batch) *flight {
	ctx, cancel := context.WithCancel(ctx)
	f := &flight{batch: b, keys: make(map[string]struct{}, len(b.recs)), cancel: cancel, done: make(chan struct{})}
	for _, r := range b.recs {
		f.keys[string(r.Key)] = struct{}{}
	}
	go func() {
		defer close(f.done)
		defer cancel()
		f.err = w.c.handler.Handle(ctx, fence, b.topicID, b.recs)
	}()
	return f
}

// disjoint reports whether no record of recs has the key of a record of a
// batch in flight. A record without a key cannot be projected (it is
// dead-lettered) and conflicts with nothing.
func disjoint(recs []*kgo.Record, inflight []*flight) bool {
	for _, r := range recs {
		if r.Key == nil {
			continue
		}
		for _, f := range inflight {
			if _, ok := f.keys[string(r.Key)]; ok {
				return false
			}
		}
	}
	return true
}

// land cancels the batches in flight and waits for their Handle calls to
// return; none of them is committed.
func land(inflight []*flight) {
	for _, f := range inflight {
		f.cancel()
	}
	for _, f := range inflight {
		<-f.done
	}
}

// halt stops handling the partition until it is resumed (Consumer.Resume),
// revoked, or the service stops: after a *project.HaltError (the fence
// policy halt), or after any other error Handle returns, which its own
// retries could not get past (a store rejected a read). Nothing more is
// committed, the service reports not ready, projector_partition_halted is
// 1, and the age of the oldest pending record grows, which alerts. Fetching
// the partition is paused so the other partitions go on, and what was
// polled before the pause is dropped, so the poll loop never waits on a
// halted partition. It reports whether the partition was resumed.
func (w *worker) halt(err error) bool {
	component := "partition " + w.topic + "/" + strconv.Itoa(int(w.partition))
	reason := string(project.ReasonOf(err))
	w.log.Error("partition halted: nothing more is committed on it until the cause is fixed and it is resumed or the service restarted", zap.String("reason", reason), zap.Error(err))
	w.mu.Lock()
	w.haltReason, w.haltCause = reason, err.Error()
	w.mu.Unlock()
	w.c.health.Fail(component, "halted: "+err.Error())
	w.c.m.halted.WithLabelValues(w.topic, strconv.Itoa(int(w.partition))).Set(1)
	w.c.m.halts.WithLabelValues(reason).Inc()
	w.halted.Store(true)
	w.cl.PauseFetchPartitions(map[string][]int32{w.topic: {w.partition}})
	w.dropInbox()
	for {
		select {
		case <-w.quit:
			w.c.health.Recover(component)
			return false
		case resumed := <-w.resume:
			// The poll loop has set the fetch position back to the first
			// uncommitted record; what was polled before is dropped.
			w.dropInbox()
			w.mu.Lock()
			w.pending = w.pending[:0]
			w.haltReason, w.haltCause = "", ""
			w.mu.Unlock()
			w.c.m.halted.WithLabelValues(w.topic, strconv.Itoa(int(w.partition))).Set(0)
			w.c.health.Recover(component)
			w.halted.Store(false)
			close(resumed)
			return true
		case <-w.ready:
			// Polled before the pause took effect: dropped uncommitted.
			w.dropInbox()
		}
	}
}

func (w *worker) commit(ctx context.Context, last *kgo.Record) {
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	start := time.Now()
	err := w.cl.CommitRecords(ctx, last)
	w.c.m.commitSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		w.c.m.commitErrors.Inc()
		w.log.Warn("offset commit failed; the records will be delivered again", zap.Int64("offset", last.Offset), zap.Error(err))
		return
	}
	w.mu.Lock()
	w.next = last.Offset + 1
	w.mu.Unlock()
	w.updateLag()
}

// observeEnd raises the high watermark to end, read from the brokers, and
// updates the lag once the partition's next offset is known (its first
// records arrived).
func (w *worker) observeEnd(end int64) {
	w.mu.Lock()
	w.highWatermark = max(w.highWatermark, end)
	known := w.next >= 0
	w.mu.Unlock()
	if known {
		w.updateLag()
	}
}

func (w *worker) updateLag() {
	w.mu.Lock()
	lag := w.highWatermark - w.next
	w.mu.Unlock()
	if lag < 0 {
		lag = 0
	}
	w.c.m.lag.WithLabelValues(w.topic, strconv.Itoa(int(w.partition))).Set(float64(lag))
}

// state is what Consumer.Partitions lists of the worker's partition.
func (w *worker) state() PartitionState {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := PartitionState{Topic: w.topic, Partition: w.partition, State: "running", Reason: w.haltReason, Cause: w.haltCause,
		NextOffset: w.next, Lag: -1}
	if w.halted.Load() {
		s.State = "halted"
	}
	if w.next >= 0 && w.highWatermark >= w.next {
		s.Lag = w.highWatermark - w.next
	}
	if t := w.oldestLocked(); !t.IsZero() {
		s.OldestUncommittedSeconds = time.Since(t).Seconds()
	}
	return s
}

func (w *worker) popPending() {
	w.mu.Lock()
	if len(w.pending) > 0 {
		w.pending = w.pending[1:]
	}
	w.mu.Unlock()
}

// oldestPending returns since when the oldest uncommitted record has been
// known: the receive time of the oldest uncommitted batch, or, before the
// first records arrived, the assignment of a partition found lagging; the
// zero time when there is none.
func (w *worker) oldestPending() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.oldestLocked()
}

func (w *worker) oldestLocked() time.Time {
	if len(w.pending) > 0 {
		return w.pending[0]
	}
	return w.backlogSince
}

// oldestReceived returns the receive time of the oldest uncommitted batch,
// or the zero time when none was received and not committed.
func (w *worker) oldestReceived() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return time.Time{}
	}
	return w.pending[0]
}
