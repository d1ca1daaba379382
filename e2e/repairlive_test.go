package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRepairWhileRunning runs `reconcile --repair --delete-orphans` while
// `run` projects new versions of the documents it repairs. The repair reads
// the relational copy (version 1), then is held at a fault point until run
// has written version 2 to the index and the graph and waits for the
// repair lease before its relational write; when the repair writes on, no
// store may end older than the log. Before the repair lease and the
// stores' version guards, the repair wrote version 1 back over version 2
// behind committed offsets.
func TestRepairWhileRunning(t *testing.T) {
	w := newWorld(t, 2)
	m := newModel()
	var v1, v2 []*kgo.Record
	var keys []string
	for i := range 10 {
		key := w.key(fmt.Sprintf("r%d", i))
		keys = append(keys, key)
		for _, d := range []doc{{Key: key, Version: 1, Title: "one", Chunks: []string{"a", "b", "c"}}} {
			m.apply(d)
			v1 = append(v1, d.record())
		}
		for _, d := range []doc{{Key: key, Version: 2, Title: "two", Chunks: []string{"x"}}} {
			m.apply(d)
			v2 = append(v2, d.record())
		}
	}
	w.produce(v1...)
	p := w.start(nil, "--batch-records", "5")
	w.waitDrained(p, 2*time.Minute)

	// Lose the index's points of every document, so the repair re-projects
	// them all from the relational copy.
	_, err := w.qd.Delete(context.Background(), &qdrant.DeletePoints{
		CollectionName: w.collection, Wait: qdrant.PtrOf(true),
		Points: qdrant.NewPointsSelectorFilter(&qdrant.Filter{Must: []*qdrant.Condition{qdrant.NewMatchKeywords("document_key", keys...)}}),
	})
	if err != nil {
		t.Fatal(err)
	}

	repair := exec.Command(bin, append(w.reconcileArgs(), "--repair", "--delete-orphans")...)
	release := filepath.Join(t.TempDir(), "release")
	repair.Env = append(repair.Environ(), "PROJECTOR_FAULTS=before-repair-write=await:"+release)
	out := &syncBuffer{}
	repair.Stdout, repair.Stderr = out, out
	if err := repair.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- repair.Wait() }()
	waitFor(t, time.Minute, "the repair to hold before its write", func() bool {
		return strings.Contains(out.String(), "fault: holding at before-repair-write")
	})
	w.produce(v2...)
	waitFor(t, time.Minute, "run to wait for the repair lease", func() bool {
		return strings.Contains(p.log.String(), "a repair holds the repair lease")
	})
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("reconcile --repair: %v\n%s", err, out.String())
	}
	w.waitDrained(p, 2*time.Minute)
	p.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
}
