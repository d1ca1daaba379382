package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/dlq"
)

// TestFenceMismatchPolicies makes the index silently drop one document's
// writes (a test-only fault), so its fence never matches. Under the dlq
// policy the document's record goes to the dead-letter topic and the rest
// goes on; under halt the partition stops before it, the service reports
// not ready, and nothing past it is committed.
func TestFenceMismatchPolicies(t *testing.T) {
	t.Run("dlq", func(t *testing.T) {
		w := newWorld(t, 1)
		w.produce(
			doc{Key: w.key("fine-1"), Version: 1, Chunks: []string{"a"}}.record(),
			doc{Key: w.key("lost"), Version: 1, Chunks: []string{"b", "c"}}.record(),
			doc{Key: w.key("fine-2"), Version: 1, Chunks: []string{"d"}}.record(),
		)
		p := w.start([]string{"PROJECTOR_FAULTS=drop-index=lost"}, "--fence-retries", "2")
		w.waitDrained(p, time.Minute)
		metrics := p.metrics()
		p.stop()
		letters := w.deadLetters()
		if len(letters) != 1 || string(letters[0].Key) != w.key("lost") || header(letters[0], dlq.HeaderReason) != "fence_mismatch" {
			t.Fatalf("dead letters = %d, want the record of %q with reason fence_mismatch", len(letters), w.key("lost"))
		}
		if detail := header(letters[0], dlq.HeaderDetail); !strings.Contains(detail, "index") {
			t.Errorf("detail = %q, want it to name the index", detail)
		}
		// The batch, then two re-projections: three checks found the index
		// short of the document.
		if got := metrics[`projector_fence_mismatches_total{store="index"}`]; got != 3 {
			t.Errorf("index fence mismatches = %v, want 3", got)
		}
		if got := metrics[`projector_fence_mismatches_total{store="graph"}`]; got != 0 {
			t.Errorf("graph fence mismatches = %v, want 0", got)
		}
	})
	t.Run("halt", func(t *testing.T) {
		w := newWorld(t, 2)
		w.produceTo(0, doc{Key: w.key("fine-1"), Version: 1, Chunks: []string{"a"}}.record())
		p := w.start([]string{"PROJECTOR_FAULTS=drop-index=lost"}, "--on-fence-mismatch", "halt", "--batch-records", "1")
		w.waitDrained(p, time.Minute)
		w.produceTo(0,
			doc{Key: w.key("lost"), Version: 1, Chunks: []string{"b"}}.record(),
			doc{Key: w.key("fine-2"), Version: 1, Chunks: []string{"c"}}.record(),
		)
		waitFor(t, time.Minute, "the partition to halt", func() bool {
			code, body := p.get("/readyz")
			return code == 503 && strings.Contains(body, "halted")
		})
		// More records for the halted partition, in separate polls, must
		// not hold up the poll loop: the other partition goes on.
		for i := 0; i < 3; i++ {
			w.produceTo(0, doc{Key: w.key(fmt.Sprintf("later-%d", i)), Version: 1, Chunks: []string{"e"}}.record())
			time.Sleep(300 * time.Millisecond)
		}
		w.produceTo(1, doc{Key: w.key("elsewhere"), Version: 1, Chunks: []string{"d"}}.record())
		waitFor(t, 30*time.Second, "partition 1 to be committed", func() bool {
			return w.committed()[1] == 1
		})
		time.Sleep(2 * time.Second)
		if got := w.committed()[0]; got != 1 {
			t.Errorf("partition 0 committed offset = %d, want 1: nothing committed from the halted record on", got)
		}
		metrics := p.metrics()
		if got := metrics[`projector_partition_halted{partition="0",topic="`+w.topic+`"}`]; got != 1 {
			t.Errorf("projector_partition_halted = %v, want 1", got)
		}
		if got := metrics["projector_ready"]; got != 0 {
			t.Errorf("projector_ready = %v, want 0", got)
		}
		p.stop()
		if letters := w.deadLetters(); len(letters) != 0 {
			t.Errorf("dead letters = %d, want none under halt", len(letters))
		}
	})
}
