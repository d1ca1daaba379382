package explore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/project"
)

// TestExplore runs the explorer's cases on the real stores: every one with
// EXPLORE=all (make explore), the one named by EXPLORE_CASE, or else a
// sample of EXPLORE_SAMPLE cases (default 40) chosen by EXPLORE_SEED,
// which the log prints so that a failing sample can be run again.
func TestExplore(t *testing.T) {
	if testing.Short() {
		t.Skip("the explorer needs the real stores")
	}
	if os.Getenv("EXPLORE") == "" && os.Getenv("EXPLORE_CASE") == "" {
		t.Skip("set EXPLORE=all, EXPLORE=sample or EXPLORE_CASE=<name>: the explorer finds holes the write path still has")
	}
	run := selectCases(t, allCases())
	s := openStores(t)
	e := &explorer{stores: s, refs: map[string]snapshot{}}
	for _, c := range run {
		t.Run(c.name(), func(t *testing.T) {
			if err := e.run(t, c); err != nil {
				t.Errorf("%v\nrun it again: EXPLORE_CASE=%q go test ./internal/explore -run TestExplore -v", err, c.name())
			}
		})
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
	n, err := strconv.Atoi(envOr("EXPLORE_SAMPLE", "40"))
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
	refs   map[string]snapshot
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
	reg     *prometheus.Registry
	letters *letterBox
	logs    *observer.ObservedLogs
}

func (e *explorer) member(name string, g *gate, overwrite bool) *member {
	core, logs := observer.New(zap.DebugLevel)
	m := &member{reg: prometheus.NewRegistry(), letters: &letterBox{}, logs: logs}
	policy := project.ConflictDLQ
	if overwrite {
		policy = project.ConflictOverwrite
	}
	deps := project.Deps{
		Decoder:     event.NewDecoder(event.Limits{MaxRecordBytes: 1 << 20, MaxChunks: 100, VectorDim: dim}, event.Splitter{MaxBytes: event.DefaultChunkBytes}),
		Embedder:    embed.NewHashing(dim),
		Index:       e.stores.index,
		Graph:       e.stores.graph,
		Relational:  e.stores.rel,
		Fences:      fence.New(fence.IDs, m.reg, e.stores.index, e.stores.graph, e.stores.rel),
		DeadLetters: m.letters,
		Health:      health.New(),
	}
	if g != nil {
		deps.Faults = g
	}
	m.proj = project.New(project.Config{
		OnConflict: policy, OnFenceMismatch: project.FenceDLQ, FenceRetries: 2, Writer: name,
		RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}, zap.New(core).With(zap.String("member", name)), m.reg, deps)
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
func (e *explorer) ref(ctx context.Context, k kind) (snapshot, error) {
	e.mu.Lock()
	snap, ok := e.refs[k.name]
	e.mu.Unlock()
	if ok {
		return snap, nil
	}
	part := e.partition()
	key := fmt.Sprintf("%s/ref-%s", e.stores.run, k.name)
	recs := k.records(e.stores.topic, part, key)
	m := e.member("clean", nil, k.overwrite)
	f, err := e.stores.rel.AcquireFence(ctx, e.stores.topic, part, "clean")
	if err != nil {
		return nil, err
	}
	for _, batch := range [][]*kgo.Record{recs[:len(k.prefix)], recs[len(k.prefix):]} {
		if err := m.proj.Handle(ctx, f, project.TopicID{}, batch); err != nil {
			return nil, fmt.Errorf("clean delivery: %w", err)
		}
	}
	if got := m.letters.reasons(); len(got) > 0 {
		return nil, fmt.Errorf("clean delivery sent dead letters: %v", got)
	}
	snap, err = e.stores.snapshot(ctx, key)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.refs[k.name] = snap
	e.mu.Unlock()
	return snap, nil
}

// run forces one case: the prefix committed by a first owner; the late
// writer A, which took the partition next, held at c.late in its batch;
// the partition's new owner B, which takes the partition after A, run to
// c.owner; then both let go in c.order. B must commit the whole range
// without a dead letter or a halt, and every store must end as one clean
// delivery of the log leaves it.
func (e *explorer) run(t *testing.T, c kase) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	want, err := e.ref(ctx, c.kind)
	if err != nil {
		return err
	}
	part := e.partition()
	key := fmt.Sprintf("%s/%d/x", e.stores.run, part)
	recs := e.recordsOf(c.kind, part, key)
	rel := e.stores.rel

	first := e.member("first", nil, c.kind.overwrite)
	f0, err := rel.AcquireFence(ctx, e.stores.topic, part, "first")
	if err != nil {
		return err
	}
	if err := first.proj.Handle(ctx, f0, project.TopicID{}, recs.prefix); err != nil {
		return fmt.Errorf("the first owner's batch: %w", err)
	}

	lateGate, ownerGate := newGate(c.late), newGate(c.owner)
	late, owner := e.member("late", lateGate, c.kind.overwrite), e.member("owner", ownerGate, c.kind.overwrite)
	fa, err := rel.AcquireFence(ctx, e.stores.topic, part, "late")
	if err != nil {
		return err
	}
	a := startWriter("the late writer", lateGate, func() error {
		return late.proj.Handle(ctx, fa, project.TopicID{}, recs.batch(c.split.a))
	})
	defer func() { _ = a.finish() }()
	if err := a.wait(); err != nil {
		return err
	}
	if !a.held {
		t.Skipf("the late writer ends without passing %s (passed %s, %v)", c.late, lateGate.trace(), a.err)
	}

	b := startWriter("the owner", ownerGate, func() error {
		fb, err := rel.AcquireFence(ctx, e.stores.topic, part, "owner")
		if err != nil {
			return err
		}
		for n, batch := range c.split.b {
			ownerGate.setBatch(n + 1)
			if err := owner.proj.Handle(ctx, fb, project.TopicID{}, recs.batch(batch)); err != nil {
				return fmt.Errorf("batch %d: %w", n+1, err)
			}
			ownerGate.At(ctx, "commit")
		}
		return nil
	})
	defer func() { _ = b.finish() }()
	if err := b.wait(); err != nil {
		return err
	}
	if !b.held {
		return fmt.Errorf("the owner ended without passing %s (passed %s): %v", c.owner, ownerGate.trace(), b.err)
	}

	if c.order == ownerFirst {
		// One step of the late writer, the write after its point; then
		// the owner to its end before the late writer's rest.
		a.goOn(anyPoint)
		if err := a.wait(); err != nil {
			return err
		}
		if err := b.finish(); err != nil {
			return err
		}
	}
	if err := a.finish(); err != nil {
		return err
	}
	if err := b.finish(); err != nil {
		return err
	}

	var problems []string
	if b.err != nil {
		problems = append(problems, fmt.Sprintf("the owner did not commit the range: %v", b.err))
	}
	if l := owner.letters.reasons(); len(l) > 0 {
		problems = append(problems, fmt.Sprintf("the owner dead-lettered valid records: %v", l))
	}
	got, err := e.stores.snapshot(ctx, key)
	if err != nil {
		return err
	}
	if d := got.diff(want); d != "" {
		problems = append(problems, "the stores differ from one clean delivery of the log:\n"+d)
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s\nlate writer: passed %s, returned %v\nowner: passed %s\nlate writer's log:\n%s\nowner's log:\n%s",
		joinLines(problems), lateGate.trace(), a.err, ownerGate.trace(), logText(late.logs), logText(owner.logs))
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
