package e2e

import (
	"context"
	"fmt"
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
func (w *world) flow(documents int) (stop func() error) {
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
				key := w.key(fmt.Sprintf("doc-%02d", i))
				value := fmt.Sprintf(`{"document_key":%q,"version":%d,"chunks":[`, key, v)
				for c := range 1 + (v+i)%4 {
					if c > 0 {
						value += ","
					}
					value += fmt.Sprintf(`{"text":"chunk %d of %s at version %d"}`, c, key, v)
				}
				value += "]}"
				if (v+i)%7 == 0 {
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
