package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/testenv"
)

// TestGenerationBuiltBesideTheLiveOne builds a generation of another
// dimension beside the live one while documents flow, with SIGKILLs of
// the fill and of the run member: in the end both generations hold
// exactly the relational copy's chunks, the new one with its own
// embedder's vectors, and readers' alias still points at the live one.
func TestGenerationBuiltBesideTheLiveOne(t *testing.T) {
	w := newWorld(t, 2)
	p := w.start(nil)
	p.waitReady()

	// Documents flow the whole time: new versions, with other chunk
	// counts, and now and then a withdrawal.
	stopFlow := w.flow(30)
	defer stopFlow()
	time.Sleep(2 * time.Second)

	start := append([]string{"generation", "start", "--embedder", "hashing", "--embed-dim", "16", "--fill-page-size", "3", "--fill-lease-ttl", "3s"}, w.storeFlags()...)
	out, errOut, code := w.cli(start...)
	if code != 0 || !strings.Contains(out, "Nothing changed: run again with --execute") {
		t.Fatalf("generation start without --execute: exit %d\n%s%s", code, out, errOut)
	}
	if n := w.generations(); n != 1 {
		t.Fatalf("%d generations after a start without --execute, want 1", n)
	}

	// The fill is killed once it has filled a page, and the member too.
	fill := exec.Command(bin, append(start, "--execute")...)
	fill.Env = os.Environ()
	var fillErr syncBuffer
	fill.Stderr = &fillErr
	if err := fill.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the fill's first progress line", func() bool { return strings.Contains(fillErr.String(), "generation 2: ") })
	_ = fill.Process.Signal(syscall.SIGKILL)
	_ = fill.Wait()
	p.kill()
	p = w.start(nil)
	time.Sleep(2 * time.Second)

	// Run again, the fill goes on once the killed one's lease expired.
	waitFor(t, 2*time.Minute, "the fill run again to finish", func() bool {
		out, errOut, code = w.cli(append(start, "--execute")...)
		if code != 0 && !strings.Contains(errOut, "holds its lease") {
			t.Fatalf("generation start --execute again: exit %d\n%s%s", code, out, errOut)
		}
		return code == 0
	})
	if !strings.Contains(out, "is being built") || !strings.Contains(out, "filled generation 2") {
		t.Errorf("generation start run again printed %q, want it to go on with generation 2 and fill it", out)
	}
	time.Sleep(2 * time.Second)
	if err := stopFlow(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	w.waitDrained(p, 2*time.Minute)

	want := w.relationalChunkIDs()
	if len(want) == 0 {
		t.Fatal("the relational store holds no chunk")
	}
	for _, c := range []struct {
		collection string
		dim        int
	}{{w.collection + "_g1", 384}, {w.collection + "_g2", 16}} {
		got := w.pointIDs(c.collection, c.dim)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %d points, the relational store %d chunks; extra %v, missing %v", c.collection, len(got), len(want),
				difference(got, want), difference(want, got))
		}
	}
	aliases, err := w.qd.ListAliases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(aliases, func(a *qdrant.AliasDescription) bool {
		return a.GetAliasName() == w.collection && a.GetCollectionName() == w.collection+"_g1"
	}) {
		t.Errorf("aliases %v, want %s on the live generation 1", aliases, w.collection)
	}
	out, errOut, code = w.cli(append([]string{"generation", "status"}, w.storeFlags()...)...)
	if code != 0 || !strings.Contains(out, "alias "+w.collection+" -> "+w.collection+"_g1") || !strings.Contains(out, "building") || !strings.Contains(out, "done") {
		t.Errorf("generation status: exit %d\n%s%s", code, out, errOut)
	}
	// reconcile compares the generation being built with the relational
	// copy, and refuses to repair it with the live one's vectors.
	if r := w.reconcile("--generation", "2"); r.code != 0 || len(r.found) != 0 || r.summary.Documents == 0 {
		t.Errorf("reconcile --generation 2 = exit %d, %v, %d documents; want exit 0 and no discrepancies\nstderr: %s",
			r.code, r.brief(w.prefix), r.summary.Documents, r.stderr)
	}
	if _, errOut, code := w.cli(append(w.reconcileArgs(), "--generation", "2", "--repair")...); code != 2 || !strings.Contains(errOut, "cannot be repaired") {
		t.Errorf("reconcile --generation 2 --repair: exit %d, want 2\n%s", code, errOut)
	}
}

// flow produces new versions of documents doc-00.. of this world every
// 100 ms, with other chunk counts, now and then a withdrawal, until the
// function it returns is called, which returns the first error of a
// produce.
func (w *world) flow(documents int) (stop func() error) { return w.flowOf("doc", documents, true) }

// flowOf is flow of the documents named <name>-00.., withdrawn now and
// then only with withdraw.
func (w *world) flowOf(name string, documents int, withdraw bool) (stop func() error) {
	done := make(chan struct{})
	var (
		flowing  sync.WaitGroup
		produced error
		once     sync.Once
	)
	flowing.Go(func() {
		for v := 1; ; v++ {
			select {
			case <-done:
				return
			default:
			}
			var recs []*kgo.Record
			for i := range documents {
				key := w.key(fmt.Sprintf("%s-%02d", name, i))
				value := fmt.Sprintf(`{"document_key":%q,"version":%d,"chunks":[`, key, v)
				for c := range 1 + (v+i)%4 {
					if c > 0 {
						value += ","
					}
					value += fmt.Sprintf(`{"text":"chunk %d of %s at version %d"}`, c, key, v)
				}
				value += "]}"
				if withdraw && (v+i)%7 == 0 {
					value = fmt.Sprintf(`{"document_key":%q,"version":%d,"op":"withdraw"}`, key, v)
				}
				recs = append(recs, &kgo.Record{Topic: w.topic, Key: []byte(key), Value: []byte(value)})
			}
			if produced = w.kcl.ProduceSync(context.Background(), recs...).FirstErr(); produced != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return func() error {
		once.Do(func() { close(done) })
		flowing.Wait()
		return produced
	}
}

// waitReady waits for p to answer /readyz with 200: it has prepared the
// stores, generation 1 among them.
func (p *proc) waitReady() {
	p.t.Helper()
	waitFor(p.t, time.Minute, "the member to be ready", func() bool {
		code, _ := p.get("/readyz")
		return code == 200 || p.exited()
	})
}

// generations counts the registry's generations.
func (w *world) generations() int {
	w.t.Helper()
	var n int
	if err := w.pg.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{w.schema, "index_generations"}.Sanitize()).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// relationalChunkIDs are the chunk ids of the relational store, sorted.
func (w *world) relationalChunkIDs() []string {
	w.t.Helper()
	rows, err := w.pg.Query(context.Background(), "SELECT chunk_id::text FROM "+pgx.Identifier{w.schema, "chunks"}.Sanitize()+" ORDER BY 1")
	if err != nil {
		w.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

// pointIDs are the ids of the points of collection, sorted, each checked
// to hold a vector of dimension dim.
func (w *world) pointIDs(collection string, dim int) []string {
	w.t.Helper()
	var ids []string
	var offset *qdrant.PointId
	for {
		pts, next, err := w.qd.ScrollAndOffset(context.Background(), &qdrant.ScrollPoints{
			CollectionName: collection, Offset: offset, Limit: qdrant.PtrOf(uint32(1000)), WithVectors: qdrant.NewWithVectors(true),
		})
		if err != nil {
			w.t.Fatalf("scroll %s: %v", collection, err)
		}
		for _, p := range pts {
			ids = append(ids, p.GetId().GetUuid())
			v := p.GetVectors().GetVector()
			if n := max(len(v.GetDense().GetData()), len(v.GetData())); n != dim {
				w.t.Errorf("point %s of %s has a vector of dimension %d, want %d", p.GetId().GetUuid(), collection, n, dim)
			}
		}
		if next == nil {
			break
		}
		offset = next
	}
	slices.Sort(ids)
	return ids
}

// difference is what a holds that b does not, both sorted: the first
// five, for a failure's message.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found && len(out) < 5 {
			out = append(out, x)
		}
	}
	return out
}

// TestGenerationAborted: a generation started and then aborted while
// documents flow is no longer written, its collection is deleted, the
// member goes on without a halt, and the next start takes the next number.
func TestGenerationAborted(t *testing.T) {
	w := newWorld(t, 1)
	p := w.start(nil)
	p.waitReady()
	stopFlow := w.flow(10)
	defer stopFlow()
	start := append([]string{"generation", "start", "--embedder", "hashing", "--embed-dim", "16", "--execute"}, w.storeFlags()...)
	if out, errOut, code := w.cli(start...); code != 0 {
		t.Fatalf("generation start: exit %d\n%s%s", code, out, errOut)
	}
	abort := append([]string{"generation", "abort"}, w.storeFlags()...)
	if out, errOut, code := w.cli(abort...); code != 0 || !strings.Contains(out, "Nothing changed") {
		t.Fatalf("generation abort without --execute: exit %d\n%s%s", code, out, errOut)
	}
	for range 2 { // the second is a rerun
		if out, errOut, code := w.cli(append(abort, "--execute")...); code != 0 || !strings.Contains(out, "deleted collection "+w.collection+"_g2") {
			t.Fatalf("generation abort --execute: exit %d\n%s%s", code, out, errOut)
		}
	}
	time.Sleep(2 * time.Second)
	if err := stopFlow(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	w.waitDrained(p, 2*time.Minute)
	if exists, err := w.qd.CollectionExists(context.Background(), w.collection+"_g2"); err != nil || exists {
		t.Errorf("the aborted generation's collection exists: %v, %v", exists, err)
	}
	if halts := p.metrics()[`projector_partition_halts_total{reason="handle_error"}`]; halts != 0 {
		t.Errorf("%v partitions halted, want none", halts)
	}
	if got, want := w.pointIDs(w.collection+"_g1", 384), w.relationalChunkIDs(); !slices.Equal(got, want) {
		t.Errorf("the live generation holds %d points, the relational store %d chunks", len(got), len(want))
	}
	out, errOut, code := w.cli(append([]string{"generation", "start", "--embedder", "hashing", "--embed-dim", "8"}, w.storeFlags()...)...)
	if code != 0 || !strings.Contains(out, "generation 3 (building, collection "+w.collection+"_g3") {
		t.Errorf("generation start after an abort: exit %d\n%s%s", code, out, errOut)
	}
}

// TestGenerationSwitchedAndRetired is issue 29's done-when: while
// documents flow, a generation of another model (another dimension) is
// started, filled, switched to and the old one retired, with SIGKILLs of
// the fill and of a run member; a reader searching the alias the whole
// time never gets an error, nor nothing of a live document; at the end
// the live generation holds exactly the relational copy's chunks with the
// new model's vectors, and a replay from earliest leaves it unchanged.
// E2E_GENERATION_DOCUMENTS sizes the documents flowing (CI: 40).
func TestGenerationSwitchedAndRetired(t *testing.T) {
	documents := testenv.Size(t, "E2E_GENERATION_DOCUMENTS", 40, 1)
	w := newWorld(t, 2)
	// A killed member holds the group's rebalance (and its commits) until
	// its session times out.
	oldRun := []string{"--embedder", "hashing", "--embed-dim", "384", "--session-timeout", "6s"}
	newFlags := []string{"--embedder", "hashing", "--embed-dim", "16"}
	newRun := append([]string{"--session-timeout", "6s"}, newFlags...)
	p1, p2 := w.start(nil, oldRun...), w.start(nil, oldRun...)
	p1.waitReady()
	p2.waitReady()

	// Anchors: live documents the whole test, each written again and
	// again, which the reader must always find.
	anchorKeys, stopAnchors := w.anchors(5)
	defer stopAnchors()
	stopReader := w.readAlias(anchorKeys)
	defer stopReader()
	stopFlow := w.flow(documents)
	defer stopFlow()
	time.Sleep(time.Second)

	generation := func(action string, extra ...string) (string, string, int) {
		t.Helper()
		return w.cli(append(append([]string{"generation", action}, w.storeFlags()...), extra...)...)
	}
	if out, errOut, code := generation("switch"); code == 0 || !strings.Contains(errOut, "nothing to switch to") {
		t.Errorf("switch with nothing built: exit %d\n%s%s", code, out, errOut)
	}

	// The fill is killed once it has written a page, and a run member
	// with it; the fill run again goes on once the lease expired.
	start := append([]string{"generation", "start", "--fill-page-size", "3", "--fill-lease-ttl", "3s", "--execute"}, append(w.storeFlags(), newFlags...)...)
	fill := exec.Command(bin, start...)
	fill.Env = os.Environ()
	var fillOut, fillErr syncBuffer
	fill.Stdout, fill.Stderr = &fillOut, &fillErr
	if err := fill.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the fill's first progress line", func() bool { return strings.Contains(fillErr.String(), "generation 2: ") })
	_ = fill.Process.Signal(syscall.SIGKILL)
	_ = fill.Wait()
	if !strings.Contains(fillOut.String(), "filled generation 2") { // killed before its last page
		if out, errOut, code := generation("switch", "--execute"); code == 0 || !strings.Contains(errOut, "is not done") {
			t.Errorf("switch before the fill is done: exit %d\n%s%s", code, out, errOut)
		}
	}
	p1.kill()
	p1 = w.start(nil, oldRun...)
	waitFor(t, 2*time.Minute, "the fill run again to finish", func() bool {
		out, errOut, code := w.cli(start...)
		if code != 0 && !strings.Contains(errOut, "holds its lease") {
			t.Fatalf("generation start --execute again: exit %d\n%s%s", code, out, errOut)
		}
		return code == 0
	})

	// The switch: a plan, then the registry and one alias operation.
	if out, errOut, code := generation("switch"); code != 0 || !strings.Contains(out, "Nothing changed") {
		t.Fatalf("switch without --execute: exit %d\n%s%s", code, out, errOut)
	}
	if target := w.aliasTarget(); target != w.collection+"_g1" {
		t.Fatalf("the alias points at %q after a switch without --execute, want %s_g1", target, w.collection)
	}
	if out, errOut, code := generation("switch", "--execute"); code != 0 || !strings.Contains(out, "equal") || !strings.Contains(out, "readers search generation 2") {
		t.Fatalf("switch --execute: exit %d\n%s%s", code, out, errOut)
	}
	if target := w.aliasTarget(); target != w.collection+"_g2" {
		t.Fatalf("the alias points at %q after the switch, want %s_g2", target, w.collection)
	}
	// A switch killed after its registry step left the alias behind: run
	// again, it moves the alias, and then has nothing to do.
	if err := w.qd.CreateAlias(context.Background(), w.collection, w.collection+"_g1"); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := generation("switch", "--execute"); code != 0 || !strings.Contains(out, "switched to generation 2 (live") || w.aliasTarget() != w.collection+"_g2" {
		t.Fatalf("switch --execute finishing a half-done switch: exit %d, alias on %s\n%s%s", code, w.aliasTarget(), out, errOut)
	}
	if out, errOut, code := generation("switch", "--execute"); code != 0 || !strings.Contains(out, "nothing to switch") {
		t.Errorf("switch --execute run again: exit %d\n%s%s", code, out, errOut)
	}

	// One member is rolled onto the new generation; the other, still
	// writing the old one as its live one, halts at the retire.
	p1.stop()
	p1 = w.start(nil, newRun...)
	p1.waitReady()
	waitFor(t, time.Minute, "both members to own a partition", func() bool {
		owned := func(p *proc) float64 {
			return p.metrics()[`projector_partitions_owned{topic="`+w.topic+`"}`]
		}
		return owned(p1) >= 1 && owned(p2) >= 1
	})
	if out, errOut, code := generation("retire"); code != 0 || !strings.Contains(out, "Nothing changed") || !strings.Contains(out, "restart every member") {
		t.Fatalf("retire without --execute: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := generation("retire", "--grace", "0s", "--execute"); code != 0 || !strings.Contains(out, "deleted collection "+w.collection+"_g1") {
		t.Fatalf("retire --execute: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := generation("retire", "--execute"); code != 0 || !strings.Contains(out, "deleted already") {
		t.Errorf("retire --execute run again: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, time.Minute, "the member on the retired generation to halt", func() bool {
		return p2.metrics()[`projector_partition_halts_total{reason="handle_error"}`] >= 1
	})
	if !strings.Contains(p2.log.String(), "restart the member") {
		t.Errorf("the halted member's log does not say to restart it:\n%s", tail(p2.log.String(), 20))
	}
	if halts := p1.metrics()[`projector_partition_halts_total{reason="handle_error"}`]; halts != 0 {
		t.Errorf("the member on the live generation halted %v partitions, want none", halts)
	}
	p2.kill()
	p2 = w.start(nil, newRun...)

	time.Sleep(2 * time.Second)
	if err := stopFlow(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := stopAnchors(); err != nil {
		t.Fatalf("produce anchors: %v", err)
	}
	w.waitDrained(p2, 2*time.Minute)
	reads, failures := stopReader()
	t.Logf("the reader of the alias made %d reads", reads)
	if len(failures) > 0 || reads == 0 {
		t.Errorf("the reader of the alias made %d reads, %d failed: %v", reads, len(failures), failures[:min(len(failures), 5)])
	}

	// The live generation holds exactly the current chunks, each with the
	// new model's vector.
	want := w.relationalChunkIDs()
	live := w.points(w.collection)
	if got := slices.Sorted(maps.Keys(live)); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("the alias finds %d points, the relational store holds %d chunks; extra %v, missing %v", len(got), len(want), difference(got, want), difference(want, got))
	}
	requireVectorsOf(t, live, embed.NewHashing(16))
	if exists, err := w.qd.CollectionExists(context.Background(), w.collection+"_g1"); err != nil || exists {
		t.Errorf("the retired generation's collection exists: %v, %v", exists, err)
	}
	out, errOut, code := generation("status", "--compare")
	if code != 0 || !strings.Contains(out, "alias "+w.collection+" -> "+w.collection+"_g2") || !strings.Contains(out, "retired") ||
		!strings.Contains(out, "equal") || strings.Contains(out, "differ") {
		t.Errorf("generation status: exit %d\n%s%s", code, out, errOut)
	}

	// A replay from earliest leaves the live generation as it is.
	p1.stop()
	p2.stop()
	if out, errOut, code := w.replay("--to", "earliest", "--execute"); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	p1 = w.start(nil, newRun...)
	w.waitDrained(p1, 2*time.Minute)
	if again := w.points(w.collection); !maps.EqualFunc(again, live, func(a, b point) bool { return a.text == b.text && slices.Equal(a.vector, b.vector) }) {
		got := slices.Sorted(maps.Keys(again))
		wantIDs := slices.Sorted(maps.Keys(live))
		t.Errorf("the replay changed the live generation: %d points, were %d; extra %v, missing %v", len(got), len(wantIDs), difference(got, wantIDs), difference(wantIDs, got))
	}
}

// anchors writes n live documents again and again until the function it
// returns is called, which returns the producer's error, and waits until a
// reader searching the alias finds each of them: the documents a reader
// must find throughout a test.
func (w *world) anchors(n int) (keys []string, stop func() error) {
	w.t.Helper()
	stop = w.flowOf("anchor", n, false)
	for i := range n {
		keys = append(keys, w.key(fmt.Sprintf("anchor-%02d", i)))
	}
	waitFor(w.t, time.Minute, "the anchors behind the alias", func() bool {
		for _, key := range keys {
			if n, err := w.aliasPoints(key); err != nil || n == 0 {
				return false
			}
		}
		return true
	})
	return keys, stop
}

// aliasTarget is the collection this world's alias points at ("": none).
func (w *world) aliasTarget() string {
	w.t.Helper()
	aliases, err := w.qd.ListAliases(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, a := range aliases {
		if a.GetAliasName() == w.collection {
			return a.GetCollectionName()
		}
	}
	return ""
}

// aliasPoints counts the points of document key that a reader searching
// this world's alias finds.
func (w *world) aliasPoints(key string) (uint64, error) {
	return w.qd.Count(context.Background(), &qdrant.CountPoints{
		CollectionName: w.collection, Exact: qdrant.PtrOf(true),
		Filter: &qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatch("document_key", key)}},
	})
}

// readAlias reads this world's alias for each of keys, over and over,
// until the function it returns is called, which returns the reads made
// and their failures: an error, or no point of a document.
func (w *world) readAlias(keys []string) (stop func() (reads int, failures []string)) {
	done := make(chan struct{})
	var (
		reading  sync.WaitGroup
		once     sync.Once
		n        int
		failures []string
	)
	reading.Go(func() {
		for {
			for _, key := range keys {
				select {
				case <-done:
					return
				default:
				}
				count, err := w.aliasPoints(key)
				n++
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("%s at %s: %v", key, time.Now().Format(time.StampMilli), err))
				case count == 0:
					failures = append(failures, fmt.Sprintf("%s at %s: no point", key, time.Now().Format(time.StampMilli)))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return func() (int, []string) {
		once.Do(func() { close(done) })
		reading.Wait()
		return n, failures
	}
}

// point is a point's text and vector.
type point struct {
	text   string
	vector []float32
}

// points are the points of collection (or alias) by id.
func (w *world) points(collection string) map[string]point {
	w.t.Helper()
	out := map[string]point{}
	var offset *qdrant.PointId
	for {
		pts, next, err := w.qd.ScrollAndOffset(context.Background(), &qdrant.ScrollPoints{
			CollectionName: collection, Offset: offset, Limit: qdrant.PtrOf(uint32(1000)),
			WithVectors: qdrant.NewWithVectors(true), WithPayload: qdrant.NewWithPayloadInclude("text"),
		})
		if err != nil {
			w.t.Fatalf("scroll %s: %v", collection, err)
		}
		for _, p := range pts {
			v := p.GetVectors().GetVector()
			data := v.GetDense().GetData()
			if len(data) == 0 {
				data = v.GetData()
			}
			out[p.GetId().GetUuid()] = point{text: p.GetPayload()["text"].GetStringValue(), vector: data}
		}
		if next == nil {
			return out
		}
		offset = next
	}
}

// requireVectorsOf fails unless every point of pts holds the vector emb
// computes from its text.
func requireVectorsOf(t *testing.T, pts map[string]point, emb *embed.Hashing) {
	t.Helper()
	bad := 0
	for id, p := range pts {
		want, err := emb.Embed(context.Background(), []string{p.text})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.vector, want[0]) {
			if bad++; bad <= 3 {
				t.Errorf("point %s (%q) has a vector of dimension %d that is not the new model's (dimension %d)", id, p.text, len(p.vector), emb.Dim())
			}
		}
	}
}
