package consume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/project"
)

// The consumer starts a goroutine per partition and one for the lag; goleak
// fails the run if one outlives Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTopic = "documents"

// cluster is an in-process Kafka (kfake) holding testTopic with
// partitions partitions of records records each.
type cluster struct {
	t     *testing.T
	addrs []string
	adm   *kadm.Client
}

func newCluster(t *testing.T, partitions int32, records int) *cluster {
	t.Helper()
	keys := make([]string, records)
	for i := range keys {
		keys[i] = "k"
	}
	return newClusterKeys(t, partitions, keys)
}

// newClusterKeys is newCluster with the records' keys given, the same in
// every partition.
func newClusterKeys(t *testing.T, partitions int32, keys []string) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, testTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var recs []*kgo.Record
	for p := range partitions {
		for _, k := range keys {
			recs = append(recs, &kgo.Record{Topic: testTopic, Partition: p, Key: []byte(k), Value: []byte("v")})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, addrs: c.ListenAddrs(), adm: kadm.NewClient(cl)}
}

// committed returns the group's committed offset per partition; a
// partition without a commit is absent.
func (c *cluster) committed(group string) map[int32]int64 {
	c.t.Helper()
	offsets, err := c.adm.FetchOffsets(context.Background(), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{} // nothing committed yet
	}
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[int32]int64{}
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// member is one running Consumer of the group.
type member struct {
	c      *Consumer
	health *health.Status
	stop   func()
}

func (c *cluster) start(group string, h Handler) *member {
	c.t.Helper()
	return c.startWith(group, h, func(*Config) {})
}

// startWith is start with the configuration changed by tweak.
func (c *cluster) startWith(group string, h Handler, tweak func(*Config)) *member {
	c.t.Helper()
	return c.startFenced(group, h, nil, tweak)
}

// startFenced is startWith with the members' fences taken from fences.
func (c *cluster) startFenced(group string, h Handler, fences Fences, tweak func(*Config)) *member {
	c.t.Helper()
	status := health.New()
	cfg := Config{
		Topic: testTopic, Group: group, BatchRecords: 100,
		RebalanceTimeout: 10 * time.Second, RevokeTimeout: 200 * time.Millisecond,
		SessionTimeout: 6 * time.Second, LagInterval: time.Hour,
	}
	tweak(&cfg)
	cons, err := New(cfg, zap.NewNop(), prometheus.NewRegistry(), status, h, fences, kgo.SeedBrokers(c.addrs...))
	if err != nil {
		c.t.Fatal(err)
	}
	return runMember(c.t, cons, status)
}

// runMember runs cons until its stop is called or the test ends, and fails
// the test when Run returns an error on that requested stop.
func runMember(t *testing.T, cons *Consumer, status *health.Status) *member {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	m := &member{c: cons, health: status}
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil on a requested stop", err)
			}
		})
	}
	t.Cleanup(m.stop)
	return m
}

// handlerFunc adapts a function to Handler.
type handlerFunc func(ctx context.Context, recs []*kgo.Record) error

func (f handlerFunc) Handle(ctx context.Context, _ project.Fence, _ project.TopicID, recs []*kgo.Record) error {
	return f(ctx, recs)
}

func (handlerFunc) Settle(context.Context, project.Fence) error { return nil }

// holdUntil is a handler whose every batch waits for release (or its
// context), as behind a store that does not answer.
func holdUntil(release <-chan struct{}) Handler {
	return handlerFunc(func(ctx context.Context, _ []*kgo.Record) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
}

// waitFor polls cond until it holds; it fails the test only when cond never
// holds, so no assertion depends on how long anything takes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw: %s", what)
		}
	}
}

// TestWorkerErrorHalts: an error Handle cannot retry past (not a
// HaltError) halts the partition visibly: not ready with the cause,
// projector_partition_halted 1, and nothing committed. Before, the worker
// returned without a word and the poll loop blocked on its queue.
func TestWorkerErrorHalts(t *testing.T) {
	c := newCluster(t, 2, 3)
	var mu sync.Mutex
	handled := map[int32]int{}
	m := c.start("halts", handlerFunc(func(_ context.Context, recs []*kgo.Record) error {
		if recs[0].Partition == 0 {
			return errors.New("read document states: permission denied")
		}
		mu.Lock()
		handled[recs[0].Partition] += len(recs)
		mu.Unlock()
		return nil
	}))
	waitFor(t, "partition 0 halted and partition 1 committed", func() bool {
		return slices.ContainsFunc(m.health.Problems(), func(p string) bool { return strings.Contains(p, "partition documents/0") }) &&
			c.committed("halts")[1] == 3
	})
	problems := m.health.Problems()
	want := "partition documents/0: halted: read document states: permission denied"
	if !slices.Contains(problems, want) {
		t.Errorf("problems = %q, want one %q", problems, want)
	}
	if got := testutil.ToFloat64(m.c.m.halted.WithLabelValues(testTopic, "0")); got != 1 {
		t.Errorf("projector_partition_halted{partition=\"0\"} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.c.m.halted.WithLabelValues(testTopic, "1")); got != 0 {
		t.Errorf("projector_partition_halted{partition=\"1\"} = %v, want 0", got)
	}
	m.stop()
	if got := c.committed("halts"); len(got) != 1 || got[1] != 3 {
		t.Errorf("committed = %v, want only partition 1 at 3", got)
	}
}

// TestRevokeCancelsInFlight: a member whose batch cannot finish (a store
// down) has it cancelled within RevokeTimeout when its partition is
// revoked, and commits nothing for it afterwards, even when the handler
// then reports success. The second member halts on whatever it gets, so
// any commit the test sees is the first member's.
func TestRevokeCancelsInFlight(t *testing.T) {
	c := newCluster(t, 2, 3)
	var mu sync.Mutex
	inFlight, cancelled := map[int32]bool{}, map[int32]bool{}
	stuck := handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
		p := recs[0].Partition
		mu.Lock()
		inFlight[p] = true
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		cancelled[p] = true
		mu.Unlock()
		return nil // a handler that ignores its cancellation
	})
	first := c.start("revoke", stuck)
	waitFor(t, "the first member handling both partitions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight[0] && inFlight[1]
	})
	second := c.start("revoke", handlerFunc(func(context.Context, []*kgo.Record) error {
		return errors.New("second member refuses")
	}))
	var moved int32 = -1
	waitFor(t, "a partition moved to the second member", func() bool {
		for _, p := range second.health.Problems() {
			for _, part := range []int32{0, 1} {
				if strings.HasPrefix(p, fmt.Sprintf("partition %s/%d:", testTopic, part)) {
					moved = part
					return true
				}
			}
		}
		return false
	})
	mu.Lock()
	wasCancelled := cancelled[moved]
	mu.Unlock()
	if !wasCancelled {
		t.Errorf("the first member's batch of partition %d was not cancelled when the partition moved", moved)
	}
	if got := c.committed("revoke"); len(got) != 0 {
		t.Errorf("committed = %v after the revoke, want nothing", got)
	}
	first.stop()
	second.stop()
	if got := c.committed("revoke"); len(got) != 0 {
		t.Errorf("committed = %v after both members stopped, want nothing", got)
	}
}

// newProducingCluster is an in-process Kafka with testTopic of one
// partition, and a function that produces n records to it.
func newProducingCluster(t *testing.T) (*kfake.Cluster, func(n int)) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, testTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return kc, func(n int) {
		for range n {
			if err := producer.ProduceSync(context.Background(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestStalledPollLoop holds the broker's fetch answers while it reports
// new records: the poll loop waits with a partition lagging, and Stalled,
// which /livez serves, says so once StallTimeout passed; when fetches flow
// again it clears.
func TestStalledPollLoop(t *testing.T) {
	kc, produce := newProducingCluster(t)
	produce(3)
	var (
		mu      sync.Mutex
		handled int
	)
	h := handlerFunc(func(_ context.Context, recs []*kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		handled += len(recs)
		return nil
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return handled
	}
	cons, err := New(Config{
		Topic: testTopic, Group: "stall", BatchRecords: 100, RebalanceTimeout: 10 * time.Second,
		SessionTimeout: 6 * time.Second, LagInterval: 50 * time.Millisecond, StallTimeout: time.Second,
	}, zap.NewNop(), prometheus.NewRegistry(), health.New(), h, nil, kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer runMember(t, cons, nil).stop()
	waitFor(t, "the first records handled", func() bool { return count() == 3 })
	if err := cons.Stalled(); err != nil {
		t.Fatalf("Stalled with nothing lagging = %v, want nil", err)
	}

	release := make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	defer unhold()
	holding := make(chan struct{})
	var holdingOnce sync.Once
	kc.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		holdingOnce.Do(func() { close(holding) })
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	// Once a fetch is held, the one before it has been answered: the
	// records produced now can only come in a held fetch.
	<-holding
	produce(2)
	waitFor(t, "Stalled to report the wedged poll loop", func() bool {
		err := cons.Stalled()
		return err != nil && strings.Contains(err.Error(), "lags 2 records")
	})
	if got := count(); got != 3 {
		t.Fatalf("handled %d records while fetches were held, want 3", got)
	}
	unhold()
	waitFor(t, "the held records handled and Stalled clear", func() bool { return count() == 5 && cons.Stalled() == nil })
}

// TestRevokeCancelsInFlightWithBacklog: batches that cannot finish, with
// a backlog of polls behind them, must not keep the group from
// rebalancing: the revoke runs, the batch of the partition that moves is
// cancelled after RevokeTimeout, and only then does the partition's next
// owner get its records. The poll loop used to hand polls to a worker by
// waiting on its queue: with a backlog it waited for ever, no revoke ran,
// and after the rebalance timeout the group gave the partition to the
// second member while the first still wrote.
func TestRevokeCancelsInFlightWithBacklog(t *testing.T) {
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d in flight", inFlight), func(t *testing.T) {
			c := newCluster(t, 2, 1000)
			var mu sync.Mutex
			var events []string
			note := func(e string, p int32) {
				mu.Lock()
				defer mu.Unlock()
				if e = fmt.Sprintf("%s %d", e, p); !slices.Contains(events, e) {
					events = append(events, e)
				}
			}
			at := func(e string, p int32) int {
				mu.Lock()
				defer mu.Unlock()
				return slices.Index(events, fmt.Sprintf("%s %d", e, p))
			}
			first := c.startWith("backlog", handlerFunc(func(ctx context.Context, recs []*kgo.Record) error {
				note("first handling", recs[0].Partition)
				<-ctx.Done()
				note("first cancelled", recs[0].Partition)
				return ctx.Err()
			}), func(cfg *Config) { cfg.MaxPollRecords, cfg.BatchesInFlight = 150, inFlight })
			// A worker holds one poll and the poll loop has handed it as
			// many as it may: any further poll of it has to wait.
			waitFor(t, "a backlog behind a batch in flight", func() bool {
				return mostPendingPolls(first.c) >= 2+queueSize(inFlight)
			})
			second := c.startWith("backlog", handlerFunc(func(_ context.Context, recs []*kgo.Record) error {
				note("second handling", recs[0].Partition)
				return nil
			}), func(cfg *Config) { cfg.MaxPollRecords = 150 })
			var moved int32 = -1
			waitFor(t, "the second member handling a partition", func() bool {
				for _, p := range []int32{0, 1} {
					if at("second handling", p) >= 0 {
						moved = p
						return true
					}
				}
				return false
			})
			if cancelled, took := at("first cancelled", moved), at("second handling", moved); cancelled < 0 || cancelled > took {
				mu.Lock()
				t.Errorf("events %v: the first member's batch of partition %d was not cancelled before the second member took it", events, moved)
				mu.Unlock()
			}
			second.stop()
			first.stop()
		})
	}
}

// mostPendingPolls is the most polls received and not committed by one
// worker of c.
func mostPendingPolls(c *Consumer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.workers {
		w.mu.Lock()
		n = max(n, len(w.pending))
		w.mu.Unlock()
	}
	return n
}

// TestThrottledPartitionIsNotStalled: a worker held back by a slow store
// has its partition's fetching paused, so the poll loop waits in the poll
// while the partition lags; that is back-pressure, not a wedged client,
// and Stalled (which /livez serves) must not report it.
func TestThrottledPartitionIsNotStalled(t *testing.T) {
	c := newCluster(t, 1, 1000)
	release := make(chan struct{})
	m := c.startWith("throttled", holdUntil(release), func(cfg *Config) {
		cfg.MaxPollRecords, cfg.StallTimeout, cfg.LagInterval = 150, 100*time.Millisecond, 20*time.Millisecond
	})
	defer close(release)
	waitFor(t, "a backlog behind the held batch", func() bool { return mostPendingPolls(m.c) >= 3 })
	waitFor(t, "the poll loop polling past StallTimeout with the lag read since", func() bool {
		since, read := m.c.pollingSince.Load(), m.c.lagRead.Load()
		return since != 0 && time.Since(time.Unix(0, since)) > 2*m.c.cfg.StallTimeout && read > since
	})
	if err := m.c.Stalled(); err != nil {
		t.Errorf("Stalled = %v while a slow store holds the partition back, want nil", err)
	}
}

// memFences hands out a token per partition that grows with every
// acquisition, as the relational store does; failures fail the next
// acquisitions. Every fence is late for late; released records the
// released tokens per partition.
type memFences struct {
	mu       sync.Mutex
	tokens   map[int32]int64
	failures int
	late     time.Duration
	released map[int32][]int64
}

func (f *memFences) ReleaseFence(_ context.Context, fence project.Fence) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.released == nil {
		f.released = map[int32][]int64{}
	}
	f.released[fence.Partition] = append(f.released[fence.Partition], fence.Token)
	return nil
}

func (f *memFences) releasedTokens(p int32) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.released[p])
}

func (f *memFences) AcquireFence(_ context.Context, topic string, partition int32) (project.Fence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return project.Fence{}, errors.New("relational store down")
	}
	if f.tokens == nil {
		f.tokens = map[int32]int64{}
	}
	f.tokens[partition]++
	fence := project.Fence{Topic: topic, Partition: partition, Token: f.tokens[partition]}
	if f.late > 0 {
		fence.LateUntil = time.Now().Add(f.late)
	}
	return fence, nil
}

// fencedHandler records the fence of every batch by partition.
type fencedHandler struct {
	mu   sync.Mutex
	seen map[int32][]int64
}

func (h *fencedHandler) Handle(_ context.Context, fence project.Fence, _ project.TopicID, recs []*kgo.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if fence.Partition != recs[0].Partition || fence.Topic != recs[0].Topic {
		return fmt.Errorf("fence of %s/%d for a batch of %s/%d", fence.Topic, fence.Partition, recs[0].Topic, recs[0].Partition)
	}
	if h.seen == nil {
		h.seen = map[int32][]int64{}
	}
	h.seen[fence.Partition] = append(h.seen[fence.Partition], fence.Token)
	return nil
}

func (h *fencedHandler) Settle(context.Context, project.Fence) error { return nil }

func (h *fencedHandler) tokens(p int32) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen[p])
}

// TestWorkersWriteUnderTheirFence: a worker takes its partition's fence
// before its first batch, retrying while the token's store fails, and
// every batch is handled under it; when the partition moves to another
// member, that member takes a newer token.
func TestWorkersWriteUnderTheirFence(t *testing.T) {
	c := newCluster(t, 2, 3)
	fences := &memFences{failures: 2}
	h := &fencedHandler{}
	first := c.startFenced("fenced", h, fences, func(cfg *Config) { cfg.BatchRecords = 1 })
	waitFor(t, "both partitions handled", func() bool { return len(h.tokens(0)) == 3 && len(h.tokens(1)) == 3 })
	for _, p := range []int32{0, 1} {
		if got := h.tokens(p); !slices.Equal(got, []int64{1, 1, 1}) {
			t.Errorf("partition %d handled under tokens %v, want [1 1 1]: the one taken at assignment", p, got)
		}
	}
	if p := first.health.Problems(); len(p) != 0 {
		t.Errorf("problems once the tokens were taken = %v, want none", p)
	}
	second := c.startFenced("fenced", &fencedHandler{}, fences, func(*Config) {})
	waitFor(t, "a partition moved to the second member under a newer token", func() bool {
		fences.mu.Lock()
		defer fences.mu.Unlock()
		return fences.tokens[0] == 2 || fences.tokens[1] == 2
	})
	second.stop()
	first.stop()
}

// heldFences is memFences behind an earlier writer that still holds the
// partitions: the first attempt ends with the store's lock timeout, the
// second outlasts the attempt's deadline, as a store that does not answer.
type heldFences struct {
	memFences
	attempts atomic.Int32
}

func (f *heldFences) AcquireFence(ctx context.Context, topic string, partition int32) (project.Fence, error) {
	switch f.attempts.Add(1) {
	case 1:
		return project.Fence{}, &project.StoreError{Store: project.StoreRelational, Err: fmt.Errorf("take the fencing token: %w", project.ErrLockTimeout)}
	case 2:
		<-ctx.Done()
		return project.Fence{}, ctx.Err()
	}
	return f.memFences.AcquireFence(ctx, topic, partition)
}

// TestFenceTimeoutsAreCountedAndRetried: an attempt to take a token that
// times out, by the store's lock timeout or by FenceTimeout, is counted
// and retried, and the partition is handled once the token is granted.
// Before FenceTimeout an attempt behind a frozen writer never returned.
func TestFenceTimeoutsAreCountedAndRetried(t *testing.T) {
	c := newCluster(t, 1, 3)
	fences := &heldFences{}
	h := &fencedHandler{}
	m := c.startFenced("held", h, fences, func(cfg *Config) { cfg.FenceTimeout = 100 * time.Millisecond })
	waitFor(t, "the partition handled", func() bool { return len(h.tokens(0)) > 0 })
	if got := h.tokens(0)[0]; got != 1 {
		t.Errorf("partition handled under token %d, want 1", got)
	}
	if got := testutil.ToFloat64(m.c.m.fenceTimeouts); got != 2 {
		t.Errorf("projector_fence_acquire_timeouts_total = %v, want 2", got)
	}
	if p := m.health.Problems(); len(p) != 0 {
		t.Errorf("problems once the token was taken = %v, want none", p)
	}
}

// TestLagKnownFromAssignment: a partition's lag and the age of its backlog
// are read from the brokers when it is assigned, not left unknown until
// its first records arrive; so a client that never gets them (every fetch
// held here) shows a growing backlog age and Stalled reports it.
func TestLagKnownFromAssignment(t *testing.T) {
	kc, produce := newProducingCluster(t)
	produce(10)
	release := make(chan struct{})
	defer close(release)
	kc.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	cons, err := New(Config{
		Topic: testTopic, Group: "seeded", RebalanceTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second,
		LagInterval: time.Hour, StallTimeout: 200 * time.Millisecond,
	}, zap.NewNop(), prometheus.NewRegistry(), health.New(), handlerFunc(func(context.Context, []*kgo.Record) error { return nil }), nil,
		kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer runMember(t, cons, nil).stop()
	waitFor(t, "the lag read at assignment", func() bool {
		ps := cons.Partitions()
		return len(ps) == 1 && ps[0].Lag == 10 && ps[0].OldestUncommittedSeconds > 0
	})
	if got := testutil.ToFloat64(cons.m.lag.WithLabelValues(testTopic, "0")); got != 10 {
		t.Errorf("projector_consumer_lag = %v before any record arrived, want 10", got)
	}
	waitFor(t, "Stalled to report the client that never got its records", func() bool {
		err := cons.Stalled()
		return err != nil && strings.Contains(err.Error(), "lags 10 records")
	})
}

// TestWorkersUseTheAssigningClient: franz-go joins the group as soon as a
// client exists, so a partition can be assigned before New has stored the
// client (under load a worker then read a nil client and panicked). The
// worker must work with the client the group callback hands it: here the
// consumer's own client reaches no broker, and the lag of the assigned
// partition is still read, through the client that assigned it.
func TestWorkersUseTheAssigningClient(t *testing.T) {
	kc, produce := newProducingCluster(t)
	produce(4)
	cons, err := New(Config{Topic: testTopic, Group: "early", LagInterval: time.Hour}, zap.NewNop(), prometheus.NewRegistry(), health.New(),
		handlerFunc(func(context.Context, []*kgo.Record) error { return nil }), nil,
		kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cons.abortClient()
		cons.cl.Close()
	}()
	assigning, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer assigning.Close()
	parts := map[string][]int32{testTopic: {0}}
	cons.assigned(context.Background(), assigning, parts)
	waitFor(t, "the lag read through the assigning client", func() bool {
		ps := cons.Partitions()
		return len(ps) == 1 && ps[0].Lag == 4
	})
	cons.revoked(context.Background(), assigning, parts)
	if ps := cons.Partitions(); len(ps) != 0 {
		t.Errorf("partitions after the revoke = %v, want none", ps)
	}
}
