package explore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fakeclock"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/project"
)

// TestExplore runs the explorer's cases on the real stores: every one with
// EXPLORE=all (make explore), the one named by EXPLORE_CASE, or else (CI)
// a sample of EXPLORE_SAMPLE cases (default 300) chosen by EXPLORE_SEED,
// which the log prints so that a failing sample can be run again.
func TestExplore(t *testing.T) {
	if testing.Short() {
		t.Skip("the explorer needs the real stores")
	}
	all := allCases()
	run := selectCases(t, all)
	golden, err := readGolden()
	if err != nil {
		t.Fatal(err)
	}
	s := openStores(t)
	e := newExplorer(s)
	var mu sync.Mutex
	outcomes := map[string]string{}
	// The cases run in parallel (go test -parallel), each in a partition
	// and under a key of its own; the group returns when all have ended.
	t.Run("cases", func(t *testing.T) {
		for _, c := range run {
			t.Run(c.name(), func(t *testing.T) {
				t.Parallel()
				rerun := fmt.Sprintf("run it again: EXPLORE_CASE=%q make explore", c.name())
				run := e.run
				if c.repair != "" {
					run = e.runRepair
				}
				out, err := run(c)
				if err != nil {
					t.Fatalf("%v\n%s", err, rerun)
				}
				mu.Lock()
				outcomes[c.name()] = out
				mu.Unlock()
				if want, ok := golden[c.name()]; ok && want != out && !updating() {
					t.Errorf("the case ends otherwise than %s records:\n got  %q\n want %q\nif that is meant, record it: EXPLORE=all EXPLORE_UPDATE=1 make explore\n%s",
						goldenPath, out, want, rerun)
				}
				if strings.HasPrefix(out, skipped) {
					t.Skip(out)
				}
			})
		}
	})
	if updating() && !t.Failed() {
		if len(outcomes) != len(all) {
			t.Fatalf("EXPLORE_UPDATE needs every case (EXPLORE=all): ran %d of %d", len(outcomes), len(all))
		}
		if err := writeGolden(all, outcomes); err != nil {
			t.Fatal(err)
		}
		if err := writeTable(outcomes); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReferenceDeliveredOnce has two cases of a kind ask for its reference
// at once, as the first parallel cases of a kind do: one clean delivery
// must serve both. Two deliveries write one document from two partitions
// at a time, and under load (a repair's lease holding up one's relational
// write) one read the other's half-written state: a reference whose graph
// still held version 1 failed a correct case.
func TestReferenceDeliveredOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("the explorer needs the real stores")
	}
	e := newExplorer(openStores(t))
	const asking = 2
	var arrived sync.WaitGroup
	arrived.Add(asking)
	e.askedRef = func() {
		arrived.Done()
		arrived.Wait()
	}
	k := kinds[0]
	snaps := make([]snapshot, asking)
	errs := make([]error, asking)
	var done sync.WaitGroup
	for i := range asking {
		done.Go(func() { snaps[i], errs[i] = e.ref(t.Context(), k) })
	}
	done.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := e.delivered.Load(); n != 1 {
		t.Errorf("%d clean deliveries of %s for %d cases asking at once, want 1", n, k.name, asking)
	}
	if d := snaps[1].diff(snaps[0]); d != "" {
		t.Errorf("the cases got different references:\n%s", d)
	}
}

// selectCases picks the cases of this run from the environment.
func selectCases(t *testing.T, all []kase) []kase {
	t.Helper()
	if name := os.Getenv("EXPLORE_CASE"); name != "" {
		for _, c := range all {
			if c.name() == name {
				return []kase{c}
			}
		}
		t.Fatalf("EXPLORE_CASE=%q: no such case", name)
	}
	if os.Getenv("EXPLORE") == "all" {
		t.Logf("explore: all %d cases", len(all))
		return all
	}
	n, err := strconv.Atoi(envOr("EXPLORE_SAMPLE", "300"))
	if err != nil || n < 1 {
		t.Fatalf("EXPLORE_SAMPLE=%q: want a whole number of at least 1", os.Getenv("EXPLORE_SAMPLE"))
	}
	seed, err := strconv.ParseUint(envOr("EXPLORE_SEED", strconv.FormatUint(uint64(time.Now().UnixNano()), 10)), 10, 64)
	if err != nil {
		t.Fatalf("EXPLORE_SEED=%q: want a whole number", os.Getenv("EXPLORE_SEED"))
	}
	t.Logf("explore: %d of %d cases, seed %d (EXPLORE_SEED=%d runs the same sample again, EXPLORE=all every case)", min(n, len(all)), len(all), seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	picked := make([]kase, len(all))
	copy(picked, all)
	rng.Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
	return picked[:min(n, len(picked))]
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// explorer runs cases on one set of stores, each case in a partition and
// under a document key of its own.
type explorer struct {
	stores *stores
	mu     sync.Mutex
	next   int32
	refs   map[string]*reference
	// delivered counts the clean deliveries made for references.
	delivered atomic.Int32
	// askedRef, when set, is called by every case asking for a reference
	// before it looks: a test's way to have cases ask at once.
	askedRef func()
}

func newExplorer(s *stores) *explorer {
	return &explorer{stores: s, refs: map[string]*reference{}}
}

// reference is one clean delivery of a kind's log, made once for every
// case of the kind: its document key is the kind's, so two deliveries at
// once would be two writers of one document from two partitions, which
// no log can produce, and each could read the other's half-written state.
type reference struct {
	once sync.Once
	snap snapshot
	err  error
}

func (e *explorer) partition() int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	return e.next
}

// member is one writer's projector, with its own metrics, dead letters
// and log.
type member struct {
	proj    *project.Projector
	fencing *project.Fencing
	reg     *prometheus.Registry
	letters *letterBox
	logs    *observer.ObservedLogs
}

// indexWriteTimeout is the bound of the members' index writes, on the
// case's fake clock: the explorer passes it by advancing the clock.
const indexWriteTimeout = 10 * time.Second

func (e *explorer) member(name string, g *gate, clock *fakeclock.Clock, j *journal, overwrite bool) *member {
	core, logs := observer.New(zap.DebugLevel)
	m := &member{reg: prometheus.NewRegistry(), letters: &letterBox{}, logs: logs}
	policy := project.ConflictDLQ
	if overwrite {
		policy = project.ConflictOverwrite
	}
	deps := project.Deps{
		Decoder:     event.NewDecoder(event.Limits{MaxRecordBytes: 1 << 20, MaxChunks: 100, VectorDim: dim}, event.Splitter{MaxBytes: event.DefaultChunkBytes}),
		Embedder:    embed.NewHashing(dim),
		Index:       recordedIndex{Index: e.stores.index, j: j, who: name},
		Graph:       recordedGraph{Graph: e.stores.graph, j: j, who: name},
		Relational:  recordedRelational{Relational: e.stores.rel, j: j, who: name},
		Settlement:  e.stores.rel,
		Fences:      fence.New(fence.IDs, m.reg, e.stores.index, e.stores.graph, e.stores.rel),
		DeadLetters: m.letters,
		Health:      health.New(),
		Clock:       clock,
	}
	var faults project.Faults
	if g != nil {
		deps.Faults, faults = g, g
	}
	m.proj = project.New(project.Config{
		OnConflict: policy, OnFenceMismatch: project.FenceDLQ, FenceRetries: 2, Writer: name,
		RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, IndexWriteTimeout: indexWriteTimeout,
	}, zap.New(core).With(zap.String("member", name)), m.reg, deps)
	m.fencing = project.NewFencing(e.stores.rel, e.stores.graph, name, indexWriteTimeout, clock, faults)
	return m
}

// letterBox keeps the dead letters a member sent.
type letterBox struct {
	mu      sync.Mutex
	letters []project.DeadLetter
}

func (b *letterBox) Send(_ context.Context, letters []project.DeadLetter) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.letters = append(b.letters, letters...)
	return nil
}

func (b *letterBox) reasons() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.letters {
		out = append(out, fmt.Sprintf("%s at offset %d: %s", l.Reason, l.Record.Offset, l.Detail))
	}
	return out
}

// ref is what one clean delivery of k's log leaves in the stores: one
// member projects the prefix, then the rest, in a partition of its own.
// The first case of a kind to ask makes the delivery; the others wait for
// it.
func (e *explorer) ref(ctx context.Context, k kind) (snapshot, error) {
	if e.askedRef != nil {
		e.askedRef()
	}
	e.mu.Lock()
	r, ok := e.refs[k.name]
	if !ok {
		r = &reference{}
		e.refs[k.name] = r
	}
	e.mu.Unlock()
	r.once.Do(func() { r.snap, r.err = e.deliver(ctx, k) })
	return r.snap, r.err
}

// deliver projects k's log once, cleanly, and reads what the stores hold.
func (e *explorer) deliver(ctx context.Context, k kind) (snapshot, error) {
	e.delivered.Add(1)
	part := e.partition()
	key := fmt.Sprintf("%s/ref-%s", e.stores.run, k.name)
	recs := k.records(e.stores.topic, part, key)
	m := e.member("clean", nil, fakeclock.New(), &journal{}, k.overwrite)
	f, err := m.fencing.AcquireFence(ctx, e.stores.topic, part)
	if err != nil {
		return nil, err
	}
	for _, batch := range [][]*kgo.Record{recs[:len(k.prefix)], recs[len(k.prefix):]} {
		if len(batch) == 0 {
			continue
		}
		if err := m.proj.Handle(ctx, f, project.TopicID{}, batch); err != nil {
			return nil, fmt.Errorf("clean delivery: %w", err)
		}
	}
	if got := m.letters.reasons(); len(got) > 0 {
		return nil, fmt.Errorf("clean delivery sent dead letters: %v", got)
	}
	return e.stores.snapshot(ctx, key)
}

// caseRun is what a case's writers share: its partition, document, log,
// clock and journal, and what one clean delivery of its log leaves.
type caseRun struct {
	e     *explorer
	c     kase
	part  int32
	key   string
	recs  caseRecords
	clock *fakeclock.Clock
	j     *journal
	want  snapshot
	// first is the fence of the owner that committed the prefix.
	first project.Fence
}

// setUp gives case c its partition and document, and commits the prefix
// of its log by a first owner, which releases the partition when release
// is set.
func (e *explorer) setUp(ctx context.Context, c kase, release bool) (*caseRun, error) {
	want, err := e.ref(ctx, c.kind)
	if err != nil {
		return nil, err
	}
	part := e.partition()
	key := fmt.Sprintf("%s/%d/x", e.stores.run, part)
	cr := &caseRun{e: e, c: c, part: part, key: key, recs: e.recordsOf(c.kind, part, key), clock: fakeclock.New(), j: &journal{}, want: want}
	first := e.member("first", nil, cr.clock, cr.j, c.kind.overwrite)
	if cr.first, err = first.fencing.AcquireFence(ctx, e.stores.topic, part); err != nil {
		return nil, err
	}
	if len(cr.recs.prefix) > 0 {
		if err := first.proj.Handle(ctx, cr.first, project.TopicID{}, cr.recs.prefix); err != nil {
			return nil, fmt.Errorf("the first owner's batch: %w", err)
		}
	}
	if release {
		if err := first.fencing.ReleaseFence(ctx, cr.first); err != nil {
			return nil, err
		}
	}
	return cr, nil
}

// startOwner starts the partition's owner: it takes its token, projects
// its batches, committing each, and settles the index once the late
// window of its token is over on the case's clock.
func (cr *caseRun) startOwner(ctx context.Context, owner *member, g *gate) *writer {
	return startWriter("the owner", g, func() error {
		fb, err := owner.fencing.AcquireFence(ctx, cr.e.stores.topic, cr.part)
		if err != nil {
			return err
		}
		cr.j.add(entry{who: "owner", call: stepRaised})
		for n, batch := range cr.c.split.b {
			g.setBatch(n + 1)
			if err := owner.proj.Handle(ctx, fb, project.TopicID{}, cr.recs.batch(batch)); err != nil {
				return fmt.Errorf("batch %d: %w", n+1, err)
			}
			g.At(ctx, "commit")
		}
		g.setBatch(0)
		cr.clock.AdvanceTo(fb.LateUntil)
		return owner.proj.Settle(ctx, fb)
	})
}

// reached says how the wait for a writer to reach its point ended: held
// there (""), a skip of a case that cannot happen, or a failure.
func reached(w *writer, who, point string, g *gate) (string, error) {
	if err := w.wait(); err != nil {
		return "", err
	}
	switch {
	case w.held:
		return "", nil
	case w.err != nil:
		return "", fmt.Errorf("%s ended without passing %s (passed %s): %v", who, point, g.trace(), w.err)
	}
	return fmt.Sprintf("%s %s ends without passing %s", skipped, who, point), nil
}

// problems are what the case's owner and stores must not show: an owner
// that did not commit its range, or dead-lettered a valid record, and
// stores other than one clean delivery leaves.
func (cr *caseRun) problems(ctx context.Context, b *writer, owner *member) ([]string, error) {
	var out []string
	if b.err != nil {
		out = append(out, fmt.Sprintf("the owner did not commit the range and settle: %v", b.err))
	}
	if l := owner.letters.reasons(); len(l) > 0 {
		out = append(out, fmt.Sprintf("the owner dead-lettered valid records: %v", l))
	}
	got, err := cr.e.stores.snapshot(ctx, cr.key)
	if err != nil {
		return nil, err
	}
	if d := got.diff(cr.want); d != "" {
		out = append(out, "the stores differ from one clean delivery of the log:\n"+d)
	}
	return out, nil
}

// run forces one case: the prefix committed by a first owner; the late
// writer A, which took the partition next, held at c.late in its batch;
// the partition's new owner B, which takes the partition after A, run to
// c.owner; then both let go in c.order. B settles the index once the late
// window of its token is over on the case's clock, which ends every index
// write A began before. B must commit the whole range without a dead
// letter or a halt, and with no fence mismatch in the graph or the
// relational store, which refuse A; every store must end as one clean
// delivery of the log leaves it, with nothing left to settle.
func (e *explorer) run(c kase) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cr, err := e.setUp(ctx, c, false)
	if err != nil {
		return "", err
	}
	lateGate, ownerGate := newGate(c.late), newGate(c.owner)
	ownerGate.journal, ownerGate.who = cr.j, "owner"
	late, owner := e.member("late", lateGate, cr.clock, cr.j, c.kind.overwrite), e.member("owner", ownerGate, cr.clock, cr.j, c.kind.overwrite)
	fa, err := late.fencing.AcquireFence(ctx, e.stores.topic, cr.part)
	if err != nil {
		return "", err
	}
	a := startWriter("the late writer", lateGate, func() error {
		return late.proj.Handle(ctx, fa, project.TopicID{}, cr.recs.batch(c.split.a))
	})
	defer func() { _ = a.finish() }()
	if out, err := reached(a, "the late writer", c.late, lateGate); out != "" || err != nil {
		return out, err
	}
	b := cr.startOwner(ctx, owner, ownerGate)
	defer func() { _ = b.finish() }()
	if out, err := reached(b, "the owner", c.owner, ownerGate); out != "" || err != nil {
		return out, err
	}

	if c.order == ownerFirst {
		// One step of the late writer, the write after its point; then
		// the owner to its end before the late writer's rest.
		a.goOn(anyPoint)
		if err := a.wait(); err != nil {
			return "", err
		}
		if err := b.finish(); err != nil {
			return "", err
		}
	}
	if err := a.finish(); err != nil {
		return "", err
	}
	if err := b.finish(); err != nil {
		return "", err
	}

	problems, err := cr.problems(ctx, b, owner)
	if err != nil {
		return "", err
	}
	for _, store := range []string{"graph", "relational"} {
		if n := counter(owner.reg, "projector_fence_mismatches_total", store); n > 0 {
			problems = append(problems, fmt.Sprintf("the owner's fence found the %s store not holding its write %v times: the late writer's write landed there", store, n))
		}
	}
	var left int
	if err := e.stores.rel.Pool().QueryRow(ctx, `SELECT count(*) FROM index_settle WHERE source_topic = $1 AND source_partition = $2`,
		e.stores.topic, cr.part).Scan(&left); err != nil {
		return "", err
	}
	if left > 0 {
		problems = append(problems, fmt.Sprintf("%d documents left to settle after the owner's settle", left))
	}
	v := cr.j.verdicts("late", counter(owner.reg, "projector_index_settled_points_total", "") > 0,
		counter(owner.reg, "projector_fence_mismatches_total", project.StoreIndex) > 0)
	for _, store := range []string{v.graph, v.relational} {
		if store == takenAfterToken {
			problems = append(problems, "a store took the late writer's write after the owner's token")
		}
	}
	if len(problems) == 0 {
		return v.String(), nil
	}
	return "", fmt.Errorf("%s\nlate writer: passed %s, returned %v\nowner: passed %s\nlate writer's log:\n%s\nowner's log:\n%s",
		joinLines(problems), lateGate.trace(), a.err, ownerGate.trace(), logText(late.logs), logText(owner.logs))
}

// counter reads a counter of reg by its store label, or the sum of its
// series when store is "".
func counter(reg *prometheus.Registry, name, store string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range f.GetMetric() {
			if store == "" {
				sum += m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "store" && l.GetValue() == store {
					return m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	return 0
}

// caseRecords are a case's log: the committed prefix and the rest.
type caseRecords struct {
	prefix []*kgo.Record
	rest   []*kgo.Record
}

func (e *explorer) recordsOf(k kind, part int32, key string) caseRecords {
	recs := k.records(e.stores.topic, part, key)
	return caseRecords{prefix: recs[:len(k.prefix)], rest: recs[len(k.prefix):]}
}

// batch returns the records of the rest at the given indexes.
func (r caseRecords) batch(at []int) []*kgo.Record {
	out := make([]*kgo.Record, len(at))
	for i, n := range at {
		out[i] = r.rest[n]
	}
	return out
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "- " + l + "\n"
	}
	return out
}

func logText(logs *observer.ObservedLogs) string {
	out := ""
	for _, e := range logs.All() {
		out += "  " + e.Level.String() + " " + e.Message
		for _, f := range e.Context {
			if f.Key == "member" {
				continue
			}
			out += fmt.Sprintf(" %s=%v", f.Key, fieldValue(f))
		}
		out += "\n"
	}
	return out
}

func fieldValue(f zap.Field) any {
	switch {
	case f.String != "":
		return f.String
	case f.Interface != nil:
		return f.Interface
	default:
		return f.Integer
	}
}
