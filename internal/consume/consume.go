// Package consume reads the document topic as a member of a consumer group
// and hands each partition's records, in order, to a Handler.
//
// One goroutine per assigned partition handles that partition's records in
// offset order; partitions run concurrently. Within a partition, up to
// BatchesInFlight batches that share no record key are handled at once,
// and committed in offset order. A partition's worker is the
// only code that commits its offsets, and it commits only after the Handler
// returned nil for every record up to the committed one. With
// kgo.BlockRebalanceOnPoll, a rebalance can only happen between polls, and
// the revoke callback waits for the workers of revoked partitions to finish
// their batches in flight and commit, so a partition is never handled by two members at
// once and no commit is made after a revoke. The poll loop never waits for
// a worker, so the callbacks always run when the group rebalances: a
// partition whose worker is behind has its fetching paused instead, until
// the worker catches up. The revoke callback waits at
// most RevokeTimeout, below the group's rebalance timeout, then cancels the
// batches still in flight; a lost partition's are cancelled at once, and a
// cancelled batch is never committed.
package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/project"
)

// Handler handles consecutive records of one partition of the topic whose
// id is topicID (zero when the broker does not send it), written under
// fence, the member's claim on the partition. It returns nil only when
// every record is done and may be committed. A *project.HaltError halts
// the partition; any other error abandons the batch uncommitted. Handle is
// called concurrently for batches of different partitions, and for
// batches of one partition that share no record key.
type Handler interface {
	Handle(ctx context.Context, fence project.Fence, topicID project.TopicID, recs []*kgo.Record) error
	// Settle settles the index for the partition of fence once no index
	// write of an earlier owner can land any more (fence.LateUntil); the
	// worker calls it once per assignment, between batches.
	Settle(ctx context.Context, fence project.Fence) error
}

// Fences gives a member its claim on a partition when the partition is
// assigned to it: a token newer than every earlier owner's, which the
// stores check on every write (project.Fence), and takes it back when the
// member stops writing the partition with nothing on its way.
type Fences interface {
	AcquireFence(ctx context.Context, topic string, partition int32) (project.Fence, error)
	ReleaseFence(ctx context.Context, fence project.Fence) error
}

// Config is the consumer's configuration.
type Config struct {
	Topic string
	Group string
	// MaxPollRecords bounds the records of one poll across partitions. A
	// partition's worker holds the poll it handles and at most one more
	// waiting, so with FetchMaxBytes (what the client buffers) it bounds
	// the records a member holds, whatever the backlog.
	MaxPollRecords int
	// BatchRecords bounds the records of one Handle call; the worker
	// commits after each.
	BatchRecords int
	// BatchesInFlight bounds the batches of one partition handled at once
	// (default 1). Batches with a record key in common are never handled
	// together, and each is committed only after every earlier one.
	BatchesInFlight int
	// FetchMaxBytes bounds what the client buffers from the broker; with
	// MaxPollRecords it bounds the memory of records in flight.
	FetchMaxBytes int32
	// FetchMaxPartitionBytes bounds one partition's part of a fetch. Well
	// below FetchMaxBytes, every fetch carries records of every partition
	// with a backlog, so all partition workers have work at once; equal to
	// it, one partition's backlog fills whole fetches and the partitions
	// are drained one after the other. The bounds count compressed bytes:
	// well-compressed records take several times more once decompressed.
	FetchMaxPartitionBytes int32
	// ShutdownTimeout is how long in-flight batches may take to finish,
	// and the group to be left, once the service is asked to stop; then
	// the batches are abandoned uncommitted (default
	// DefaultShutdownTimeout, at most MaxShutdownTimeout).
	ShutdownTimeout time.Duration
	// RebalanceTimeout is how long the group waits for every member to
	// finish its revokes when it rebalances (kgo.RebalanceTimeout).
	RebalanceTimeout time.Duration
	// RevokeTimeout is how long a revoked partition's in-flight batches may
	// take to finish and commit; then it is cancelled uncommitted. It must
	// be below RebalanceTimeout, so a member that cannot finish (a store
	// down) has stopped writing before the group gives the partition to
	// another member.
	RevokeTimeout time.Duration
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating before it gives the member's partitions to others.
	SessionTimeout time.Duration
	// InstanceID, when set, makes the member static (KIP-345): a process
	// restarted with the same id gets its partitions back at once instead of
	// after SessionTimeout, and a clean shutdown does not rebalance the group.
	InstanceID string
	// LagInterval is how often the end offsets are read from the brokers
	// for the lag gauge, so it keeps growing while polling stands still
	// (a store is down and fetching of the partitions is paused).
	LagInterval time.Duration
	// StallTimeout is how long the poll loop may wait for records while
	// a partition it fetches lags before Stalled reports it wedged
	// (default 5 minutes).
	StallTimeout time.Duration
	// FenceTimeout bounds one attempt to take an assigned partition's
	// fencing token (default 10 s, above the relational store's lock
	// timeout, which usually ends a wait behind an earlier writer first).
	FenceTimeout time.Duration
}

// The shares of Run's stop in the process's 10 s (internal/shutdown):
// in-flight batches and the group leave get ShutdownTimeout, the stores'
// closes and the exit what is left.
const (
	DefaultShutdownTimeout = 5 * time.Second
	MaxShutdownTimeout     = 6 * time.Second
)

// Check refuses settings under which the consumer cannot keep its
// promises, so that a caller can refuse them before it starts anything: a
// revoke timeout at or above the rebalance timeout would let the group give
// a partition to another member while the old one still writes it, and a
// shutdown timeout above MaxShutdownTimeout would keep a stopping process
// past its 10 s.
func (c Config) Check() error {
	if c.RevokeTimeout > 0 && c.RebalanceTimeout > 0 && c.RevokeTimeout >= c.RebalanceTimeout {
		return fmt.Errorf("revoke timeout %s must be below the rebalance timeout %s", c.RevokeTimeout, c.RebalanceTimeout)
	}
	if c.ShutdownTimeout > MaxShutdownTimeout {
		return fmt.Errorf("shutdown timeout %s must be at most %s, so that a stopping process exits within 10 s", c.ShutdownTimeout, MaxShutdownTimeout)
	}
	return nil
}

// Consumer is a group member of the document topic.
type Consumer struct {
	cfg     Config
	log     *zap.Logger
	health  *health.Status
	handler Handler
	// fences is nil when the stores check no fence (unit tests).
	fences Fences
	m      *metrics
	cl     *kgo.Client

	// workCtx is the context of every Handle and commit. It outlives the
	// Run context by ShutdownTimeout so in-flight batches can finish.
	workCtx    context.Context
	cancelWork context.CancelFunc
	// abortClient cancels the context of the client's own requests, so
	// that a leave cut short by leave does not hold Close on a join the
	// coordinator keeps waiting.
	abortClient context.CancelFunc

	joined atomic.Bool
	// pollingSince is when the poll loop entered the poll it waits in
	// (unix nanoseconds), 0 while it is not polling; lagRead is when the
	// brokers last answered the end offsets. Stalled reads both.
	pollingSince, lagRead atomic.Int64

	// mu guards workers. The poll loop and the group callbacks, which
	// BlockRebalanceOnPoll serialises, are the only writers; the metrics
	// scrape reads under mu.
	mu      sync.Mutex
	workers map[partitionKey]*worker
	// wake, under mu, ends the poll in progress, so that a resume request
	// is served at once even when no partition has records.
	wake context.CancelFunc
	// resumes carries Resume's requests to the poll loop, which alone may
	// set fetch positions (see kgo.Client.SetOffsets).
	resumes chan resumeRequest
}

// resumeRequest asks the poll loop to resume a halted partition.
type resumeRequest struct {
	key  partitionKey
	done chan error
}

// The errors of Resume, for its callers to tell apart.
var (
	ErrNotAssigned = errors.New("the partition is not assigned to this member")
	ErrNotHalted   = errors.New("the partition is not halted")
)

// PartitionState is what the admin endpoint lists of an assigned partition.
type PartitionState struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// State is "running" or "halted".
	State string `json:"state"`
	// Reason and Cause say why a halted partition halted.
	Reason string `json:"reason,omitempty"`
	Cause  string `json:"cause,omitempty"`
	// NextOffset is the next offset to commit, -1 until known.
	NextOffset int64 `json:"next_offset"`
	// Lag is the records between NextOffset and the high watermark, -1
	// until both are known.
	Lag int64 `json:"lag"`
	// OldestUncommittedSeconds is the age of the oldest record received
	// and not committed; 0 when none.
	OldestUncommittedSeconds float64 `json:"oldest_uncommitted_seconds"`
}

// Partitions lists the partitions this member owns, in order.
func (c *Consumer) Partitions() []PartitionState {
	c.mu.Lock()
	workers := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		workers = append(workers, w)
	}
	c.mu.Unlock()
	out := make([]PartitionState, 0, len(workers))
	for _, w := range workers {
		out = append(out, w.state())
	}
	slices.SortFunc(out, func(a, b PartitionState) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// Resume resumes a halted partition without a restart, once its cause is
// fixed: fetching starts again at its first uncommitted record, and
// nothing of the other partitions moves. It returns ErrNotAssigned or
// ErrNotHalted when there is nothing to resume. A partition that fails
// again halts again.
func (c *Consumer) Resume(ctx context.Context, topic string, partition int32) error {
	req := resumeRequest{key: partitionKey{topic, partition}, done: make(chan error, 1)}
	select {
	case c.resumes <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	if c.wake != nil {
		c.wake()
	}
	c.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stalled reports a wedged poll loop: it has waited for records for over
// StallTimeout while the brokers, which answered the end offsets lately,
// say that a partition it fetches (one not halted) has records it has not
// received. A poll loop held back by a slow store is not stalled: the
// partitions it waits for hold records received and not yet committed, and
// their fetching is paused until their workers catch up. Neither is one during a
// broker outage, when the end offsets cannot be read: restarting helps
// neither. What a restart may cure (a client that stopped fetching) it
// reports, for a liveness probe.
func (c *Consumer) Stalled() error {
	since := c.pollingSince.Load()
	if since == 0 {
		return nil
	}
	waited := time.Since(time.Unix(0, since))
	if waited < c.cfg.StallTimeout || time.Since(time.Unix(0, c.lagRead.Load())) > 3*c.cfg.LagInterval {
		return nil
	}
	c.mu.Lock()
	workers := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		workers = append(workers, w)
	}
	c.mu.Unlock()
	for _, w := range workers {
		p := w.state()
		if p.State == "running" && p.Lag > 0 && w.oldestReceived().IsZero() {
			return fmt.Errorf("the poll loop has waited %s for records while %s/%d lags %d records", waited.Round(time.Second), p.Topic, p.Partition, p.Lag)
		}
	}
	return nil
}

// serveResumes serves the pending resume requests; the poll loop calls it
// between polls, while no revoke can run.
func (c *Consumer) serveResumes() {
	for {
		select {
		case req := <-c.resumes:
			req.done <- c.resume(req.key)
		default:
			return
		}
	}
}

func (c *Consumer) resume(k partitionKey) error {
	c.mu.Lock()
	w := c.workers[k]
	c.mu.Unlock()
	if w == nil {
		return ErrNotAssigned
	}
	if !w.halted.Load() {
		return ErrNotHalted
	}
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	if next < 0 {
		return fmt.Errorf("the position of %s/%d is not known yet", k.topic, k.partition)
	}
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{k.topic: {k.partition: {Epoch: -1, Offset: next}}})
	resumed := make(chan struct{})
	select {
	case w.resume <- resumed:
		<-resumed
	case <-w.done:
		return ErrNotAssigned
	}
	c.cl.ResumeFetchPartitions(map[string][]int32{k.topic: {k.partition}})
	c.log.Info("partition resumed", zap.String("topic", k.topic), zap.Int32("partition", k.partition), zap.Int64("offset", next))
	return nil
}

type partitionKey struct {
	topic     string
	partition int32
}

// New creates the consumer and its Kafka client from base, the connection
// options (brokers, TLS, SASL, logger, metrics hooks); the consumer adds
// the group settings. Each partition's worker takes its fence from fences
// before its first batch; with nil fences it writes unfenced.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer, h *health.Status, handler Handler, fences Fences, base ...kgo.Opt) (*Consumer, error) {
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 2000
	}
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = 500
	}
	if cfg.BatchesInFlight <= 0 {
		cfg.BatchesInFlight = 1
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 16 << 20
	}
	if cfg.FetchMaxPartitionBytes <= 0 {
		cfg.FetchMaxPartitionBytes = 1 << 20
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 5 * time.Minute
	}
	if cfg.FenceTimeout <= 0 {
		cfg.FenceTimeout = 10 * time.Second
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = 5 * time.Second
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = 60 * time.Second
	}
	if cfg.RevokeTimeout <= 0 {
		cfg.RevokeTimeout = cfg.RebalanceTimeout / 3
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg: cfg, log: log, health: h, handler: handler, fences: fences,
		workers: map[partitionKey]*worker{},
		resumes: make(chan resumeRequest, 16),
	}
	c.workCtx, c.cancelWork = context.WithCancel(context.Background())
	c.m = newMetrics(reg, cfg.Topic, c.pendingAges)
	clientCtx, abortClient := context.WithCancel(context.Background())
	c.abortClient = abortClient
	opts := append([]kgo.Opt{}, base...)
	opts = append(opts,
		kgo.WithContext(clientCtx),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.FetchMaxBytes(cfg.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(cfg.FetchMaxPartitionBytes),
		// A new group starts at the beginning: a projection must see
		// every document, not only those published after it started.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.cancelWork()
		abortClient()
		return nil, fmt.Errorf("kafka consumer client: %w", err)
	}
	c.cl = cl
	h.Fail("consumer", "not yet joined group "+cfg.Group)
	return c, nil
}

// Ready reports whether the member has joined its group.
func (c *Consumer) Ready() bool { return c.joined.Load() }

// Run polls until ctx ends, then finishes in-flight batches (for at most
// ShutdownTimeout), commits them, leaves the group and closes the client.
// It returns nil on a requested shutdown.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.cancelWork()
	defer c.abortClient()
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		c.refreshLag(lagCtx)
	}()
	pollErr := c.poll(ctx)
	stopLag()
	<-lagDone
	// From here on nothing new is handed out. Leaving the group revokes
	// every partition; the revoke callback waits for the workers, which
	// finish their batches with workCtx, cancelled only if they take too long.
	timer := time.AfterFunc(c.cfg.ShutdownTimeout, func() {
		c.log.Warn("shutdown timeout: abandoning in-flight batches uncommitted", zap.Duration("timeout", c.cfg.ShutdownTimeout))
		c.cancelWork()
	})
	defer timer.Stop()
	c.leave()
	c.cl.CloseAllowingRebalance()
	return pollErr
}

// idleLeaveTimeout bounds the wait to leave the group when no batch is in
// flight: well inside the 10 s in which an orchestrator expects a stopped
// process to go.
const idleLeaveTimeout = 5 * time.Second

// leave leaves the group, waiting for what it must: the revoke of every
// partition, in which the workers finish and commit their batches. Leaving
// also waits for a join or sync in flight, and a coordinator holds a join
// until the members it waits for rejoin or their sessions expire (members
// just killed, say): with no batch to finish, that wait is cut at
// idleLeaveTimeout. Close is then immediate, and the group drops this
// member after its session timeout, as it would a crashed one.
func (c *Consumer) leave() {
	wait := c.cfg.ShutdownTimeout
	if !c.busy() {
		wait = idleLeaveTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c.cl.AllowRebalance()
	if err := c.cl.LeaveGroupContext(ctx); errors.Is(err, context.DeadlineExceeded) {
		c.log.Warn("stopping without waiting longer to leave the group: the group drops this member after its session timeout",
			zap.Duration("waited", wait), zap.Duration("session_timeout", c.cfg.SessionTimeout))
		c.abortClient()
	}
}

func (c *Consumer) poll(ctx context.Context) error {
	for {
		pollCtx, wake := context.WithCancel(ctx)
		c.mu.Lock()
		c.wake = wake
		c.mu.Unlock()
		c.pollingSince.Store(time.Now().UnixNano())
		fetches := c.cl.PollRecords(pollCtx, c.cfg.MaxPollRecords)
		c.pollingSince.Store(0)
		c.mu.Lock()
		c.wake = nil
		c.mu.Unlock()
		wake()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			// Records of this poll are not handed out; they were not
			// committed, so the next owner gets them again.
			c.cl.AllowRebalance()
			return nil
		}
		var fatal error
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			// franz-go retries fetch errors itself; what reaches here is
			// worth one line, and then the next poll.
			c.log.Warn("fetch error", zap.String("topic", topic), zap.Int32("partition", partition), zap.Error(err))
			c.m.fetchErrors.Inc()
		})
		fetches.EachTopic(func(t kgo.FetchTopic) {
			for _, p := range t.Partitions {
				if fatal != nil || len(p.Records) == 0 {
					continue
				}
				w := c.workers[partitionKey{t.Topic, p.Partition}]
				if w == nil {
					// Cannot happen with BlockRebalanceOnPoll: assigned runs
					// before fetching a partition starts.
					fatal = fmt.Errorf("records for unassigned partition %s/%d", t.Topic, p.Partition)
					return
				}
				w.enqueue(project.TopicID(t.TopicID), p.Records, p.HighWatermark)
			}
		})
		c.serveResumes()
		c.cl.AllowRebalance()
		if fatal != nil {
			return fatal
		}
	}
}

// refreshLag reads the partitions' end offsets every LagInterval until ctx
// ends. Polls and commits update the lag too, but when a store is down the
// poll loop has every partition paused, and without this the gauge
// would stand still while the backlog grows.
func (c *Consumer) refreshLag(ctx context.Context) {
	adm := kadm.NewClient(c.cl)
	tick := time.NewTicker(c.cfg.LagInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ends, err := adm.ListEndOffsets(ctx, c.cfg.Topic)
		if err != nil {
			continue // polls and commits still update the gauge; the next tick tries again
		}
		c.lagRead.Store(time.Now().UnixNano())
		counts := map[string]int{}
		ends.Each(func(o kadm.ListedOffset) { counts[o.Topic]++ })
		for topic, n := range counts {
			c.m.partitions.WithLabelValues(topic).Set(float64(n))
		}
		// Under mu, so a partition revoked meanwhile is not given a
		// series again after stopWorkers removed it.
		c.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if w := c.workers[partitionKey{o.Topic, o.Partition}]; w != nil && o.Err == nil {
				w.observeEnd(o.Offset)
			}
		})
		c.mu.Unlock()
	}
}

// assigned starts a worker per new partition.
func (c *Consumer) assigned(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			w, ctx := newWorker(c, cl, topic, p)
			c.workers[partitionKey{topic, p}] = w
			c.m.halted.WithLabelValues(topic, strconv.Itoa(int(p))).Set(0)
			go w.run(ctx)
			c.log.Info("partition assigned", zap.String("topic", topic), zap.Int32("partition", p))
		}
		c.m.assignments.WithLabelValues(topic).Add(float64(len(ps)))
	}
	c.countOwned()
	c.joined.Store(true)
	if c.health.Recover("consumer") {
		c.log.Info("joined group", zap.String("group", c.cfg.Group))
	}
}

// revoked stops the workers of revoked partitions and waits for them: only
// then may the group give the partitions to another member. A worker may
// finish and commit its in-flight batches for RevokeTimeout, which is below
// the group's rebalance timeout; then the batches are cancelled and left
// uncommitted, so the member never writes on after the group has moved the
// partition on.
func (c *Consumer) revoked(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	c.stopWorkers(cl, parts, revokedCleanly)
}

// lost stops the workers of partitions lost without a clean revoke (the
// session expired): another member may own them already, so their
// in-flight batches are cancelled at once and nothing more is committed.
func (c *Consumer) lost(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	c.stopWorkers(cl, parts, lostSession)
	c.joined.Store(false)
	c.health.Fail("consumer", "lost the group session; rejoining")
}

func (c *Consumer) stopWorkers(cl *kgo.Client, parts map[string][]int32, why string) {
	var stopping []*worker
	c.mu.Lock()
	for topic, ps := range parts {
		for _, p := range ps {
			k := partitionKey{topic, p}
			if w := c.workers[k]; w != nil {
				close(w.quit)
				if why == lostSession {
					w.cancel()
				}
				stopping = append(stopping, w)
				delete(c.workers, k)
				c.m.revocations.WithLabelValues(topic, why).Inc()
			}
		}
	}
	c.countOwned()
	c.mu.Unlock()
	deadline := time.NewTimer(c.cfg.RevokeTimeout)
	defer deadline.Stop()
	for _, w := range stopping {
		select {
		case <-w.done:
		case <-deadline.C:
			c.log.Warn("revoke timeout: cancelling the in-flight batches of revoked partitions uncommitted", zap.Duration("timeout", c.cfg.RevokeTimeout))
			for _, s := range stopping {
				s.cancel()
			}
			<-w.done
		}
	}
	for _, w := range stopping {
		<-w.done
		// Fetching was paused if the partition halted or its worker was
		// behind; whoever gets the partition next starts fresh.
		cl.ResumeFetchPartitions(map[string][]int32{w.topic: {w.partition}})
		c.m.forget(w.topic, w.partition)
		c.log.Info("partition "+why, zap.String("topic", w.topic), zap.Int32("partition", w.partition))
	}
}

// countOwned sets projector_partitions_owned from the workers, one per
// owned partition; under mu. The configured topic is always set, to 0 when
// none of its partitions is owned.
func (c *Consumer) countOwned() {
	counts := map[string]int{c.cfg.Topic: 0}
	for k := range c.workers {
		counts[k.topic]++
	}
	for topic, n := range counts {
		c.m.owned.WithLabelValues(topic).Set(float64(n))
	}
}

// pendingAges is, per assigned partition, the age of the oldest record
// received and not yet committed; 0 when none is pending.
func (c *Consumer) pendingAges() map[partitionKey]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[partitionKey]float64, len(c.workers))
	for k, w := range c.workers {
		out[k] = 0
		if t := w.oldestPending(); !t.IsZero() {
			out[k] = time.Since(t).Seconds()
		}
	}
	return out
}

// busy reports whether a batch of any partition is queued or in flight.
func (c *Consumer) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if !w.oldestReceived().IsZero() {
			return true
		}
	}
	return false
}
