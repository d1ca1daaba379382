package e2e

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/testenv"
)

// TestGenerationLegacySwitch is the upgrade of a deployment from before
// generations (docs/upgrading.md): its collection is named as the alias
// readers search, becomes generation 1 as it is, and the first switch
// replaces it by the alias. Readers find every live document before the
// switch and after it; the member writing the legacy collection halts and
// is restarted onto the new generation, and nothing of the old model is
// left in what readers search.
func TestGenerationLegacySwitch(t *testing.T) {
	documents := testenv.Size(t, "E2E_GENERATION_DOCUMENTS", 40, 1)
	w := newWorld(t, 2)
	ctx := context.Background()

	// What a build from before generations left: a real collection named
	// --qdrant-collection, and no registry.
	legacy, err := index.Open(index.Config{Addr: testenv.QdrantAddr(t), Collection: w.collection, Dim: 384})
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Close()
	if err := legacy.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	oldRun := []string{"--embedder", "hashing", "--embed-dim", "384", "--session-timeout", "6s"}
	newFlags := []string{"--embedder", "hashing", "--embed-dim", "16"}
	newRun := append([]string{"--session-timeout", "6s"}, newFlags...)
	p := w.start(nil, oldRun...)
	p.waitReady()
	if kind := w.aliasTarget(); kind != "" {
		t.Fatalf("the legacy deployment got an alias on %q: its collection must stay as it is until the switch", kind)
	}

	anchorKeys, stopAnchors := w.anchors(5)
	defer stopAnchors()
	stopBefore := w.readAlias(anchorKeys)
	defer stopBefore()
	stopFlow := w.flow(documents)
	defer stopFlow()

	generation := func(action string, extra ...string) (string, string, int) {
		t.Helper()
		return w.cli(append(append([]string{"generation", action}, w.storeFlags()...), extra...)...)
	}
	out, errOut, code := generation("status")
	if code != 0 || !strings.Contains(out, w.collection) {
		t.Fatalf("generation status of the legacy deployment: exit %d\n%s%s", code, out, errOut)
	}
	start := append([]string{"generation", "start", "--fill-page-size", "5", "--execute"}, append(w.storeFlags(), newFlags...)...)
	if out, errOut, code := w.cli(start...); code != 0 || !strings.Contains(out, "filled generation 2") {
		t.Fatalf("generation start --execute: exit %d\n%s%s", code, out, errOut)
	}

	// The switch deletes the legacy collection and creates the alias in
	// its place: the one moment readers find nothing, which the docs say.
	reads, failures := stopBefore()
	if len(failures) > 0 || reads == 0 {
		t.Errorf("before the switch, the reader of the legacy collection made %d reads, %d failed: %v", reads, len(failures), failures[:min(len(failures), 5)])
	}
	out, errOut, code = generation("switch", "--execute")
	if code != 0 || !strings.Contains(out, "readers search generation 2") {
		t.Fatalf("switch --execute from the legacy generation: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("the reader made %d reads before the switch; the switch said:\n%s", reads, out)
	stopAfter := w.readAlias(anchorKeys)
	defer stopAfter()
	if target := w.aliasTarget(); target != w.collection+"_g2" {
		t.Fatalf("after the switch the alias points at %q, want %s_g2", target, w.collection)
	}
	out, errOut, code = generation("status")
	t.Logf("generation status after the switch:\n%s", out)
	if code != 0 || !strings.Contains(out, "retired") {
		t.Errorf("generation status after the legacy switch: exit %d; want generation 1 retired at once\n%s%s", code, out, errOut)
	}
	if out, errOut, code := generation("switch", "--to", "1", "--execute"); code == 0 {
		t.Errorf("switch back to the legacy generation, whose collection is gone: exit 0\n%s%s", out, errOut)
	}

	// The member writing the legacy collection halts, saying to restart
	// it; restarted on the new flags, it writes the live generation.
	waitFor(t, time.Minute, "the member on the legacy collection to halt", func() bool {
		return p.metrics()[`projector_partition_halts_total{reason="handle_error"}`] >= 1
	})
	if !strings.Contains(p.log.String(), "restart the member") {
		t.Errorf("the halted member's log does not say to restart it:\n%s", tail(p.log.String(), 20))
	}
	p.kill()
	p = w.start(nil, newRun...)
	if err := stopFlow(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := stopAnchors(); err != nil {
		t.Fatalf("produce anchors: %v", err)
	}
	w.waitDrained(p, 2*time.Minute)
	reads, failures = stopAfter()
	t.Logf("the reader made %d reads after the switch", reads)
	if len(failures) > 0 || reads == 0 {
		t.Errorf("after the switch, the reader of the alias made %d reads, %d failed: %v", reads, len(failures), failures[:min(len(failures), 5)])
	}

	want := w.relationalChunkIDs()
	live := w.points(w.collection)
	if got := slices.Sorted(maps.Keys(live)); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("the alias finds %d points, the relational store holds %d chunks; extra %v, missing %v", len(got), len(want), difference(got, want), difference(want, got))
	}
	requireVectorsOf(t, live, embed.NewHashing(16))
	out, errOut, code = generation("retire", "--grace", "0s", "--execute")
	if code != 0 || !strings.Contains(out, "deleted already") {
		t.Errorf("retire --execute of the legacy generation: exit %d; want nothing to delete, its name being the alias's\n%s%s", code, out, errOut)
	}
	if target := w.aliasTarget(); target != w.collection+"_g2" {
		t.Errorf("after the retire the alias points at %q, want %s_g2", target, w.collection)
	}

	// A replay from earliest leaves the live generation as it is.
	p.stop()
	if out, errOut, code := w.replay("--to", "earliest", "--execute"); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	p = w.start(nil, newRun...)
	w.waitDrained(p, 2*time.Minute)
	if again := w.points(w.collection); !maps.EqualFunc(again, live, func(a, b point) bool { return a.text == b.text && slices.Equal(a.vector, b.vector) }) {
		t.Errorf("the replay changed the live generation: %d points, were %d", len(again), len(live))
	}
}
