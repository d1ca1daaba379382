package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/testenv"
)

// TestBacklogMemory drains a large backlog and prints the process's peak
// resident memory, which the fetch and batch limits bound whatever the
// backlog. The ceiling asserted catches memory that grows with the backlog
// and a return of the held polls that kept their whole fetch (403-467 MiB,
// against 203-302 MiB without; docs/benchmarks.md, "Memory"), not a few
// megabytes.
func TestBacklogMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("drains a large backlog")
	}
	events := testenv.Size(t, "E2E_BACKLOG", 100_000, 0)
	w := newWorld(t, 4)
	body := strings.Repeat("backlog text ", 20)
	batch := make([]*kgo.Record, 0, 1000)
	for i := 0; i < events; i++ {
		key := w.key(fmt.Sprintf("b-%06d", i))
		batch = append(batch, doc{Key: key, Version: 1, Chunks: []string{body + strconv.Itoa(i), body}}.record())
		if len(batch) == cap(batch) || i == events-1 {
			w.produce(batch...)
			batch = batch[:0]
		}
	}
	start := time.Now()
	p := w.start(nil)
	w.waitDrained(p, 15*time.Minute)
	elapsed := time.Since(start)
	peak := peakRSS(t, p)
	p.stop()
	t.Logf("drained %d events in %s (%.0f events/s); peak RSS %.1f MiB", events, elapsed.Round(time.Second), float64(events)/elapsed.Seconds(), float64(peak)/(1<<20))
	if limit := int64(352 << 20); peak > limit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, limit>>20)
	}
	var n int
	if err := w.pg.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{w.schema, "documents"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != events {
		t.Errorf("documents = %d, want %d", n, events)
	}
}

// peakRSS reads the process's high-water mark of resident memory.
func peakRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read peak RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
