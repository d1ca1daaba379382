package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// TestFailoverMemory measures what deploy/k8s/statefulset.yaml's memory
// limit must hold: a member that takes the partitions of a member that
// died, with a backlog on all of them. Two members share eight partitions,
// four each (what the limit was once measured for); once both project,
// one is killed, and the survivor drains all eight. Its peak resident
// memory (VmHWM, without GOMEMLIMIT) must stay below the limit less the
// tenth GOMEMLIMIT keeps for the kernel. docs/benchmarks.md ("Memory of a
// failover") has the figure of E2E_FAILOVER_DOCUMENTS=100000.
func TestFailoverMemory(t *testing.T) {
	const partitions = 8
	w := newWorld(t, partitions)
	n := testenv.Size(t, "E2E_FAILOVER_DOCUMENTS", 2000, 100)
	docs := corpus(w, rand.New(rand.NewPCG(28, 1)), n)
	w.publishFile(lines(docs))
	static := func(i int) []string {
		return []string{"--group-instance-id", fmt.Sprintf("%s-%d", w.group, i), "--session-timeout", "6s"}
	}
	// Unset, the need is measured, not what a limit squeezes out;
	// E2E_FAILOVER_GOMEMLIMIT=460MiB checks the survivor under the
	// StatefulSet's setting.
	env := []string{"GOMEMLIMIT=" + os.Getenv("E2E_FAILOVER_GOMEMLIMIT")}
	survivor := w.start(env, static(0)...)
	doomed := w.start(env, static(1)...)
	owned := `projector_partitions_owned{topic="` + w.topic + `"}`
	survivor.waitMetrics(2*time.Minute, "the two members sharing the partitions", func(m map[string]float64) bool {
		return m[owned] == partitions/2
	})
	doomed.waitMetrics(time.Minute, "the doomed member projecting", func(m map[string]float64) bool {
		return m[`projector_records_total{outcome="projected"}`] > 0
	})
	doomed.kill()
	survivor.waitMetrics(2*time.Minute, "the survivor owning every partition", func(m map[string]float64) bool {
		return m[owned] == partitions
	})
	w.waitDrained(survivor, 20*time.Minute)
	peak := peakRSS(t, survivor)
	limit := statefulSetMemoryLimit(t)
	t.Logf("survivor of a failover of %d partitions, %d events: peak RSS %.0f MiB (limit %.0f MiB)", partitions, len(docs),
		float64(peak)/(1<<20), float64(limit)/(1<<20))
	if peak > limit*9/10 {
		t.Errorf("the survivor peaked at %.0f MiB, over %.0f MiB, 90 %% of the StatefulSet's limit: raise it (and GOMEMLIMIT) in deploy/k8s/statefulset.yaml and docs/benchmarks.md",
			float64(peak)/(1<<20), float64(limit*9/10)/(1<<20))
	}
	survivor.stop()
}

// statefulSetMemoryLimit reads the projector container's memory limit,
// in Mi, from deploy/k8s/statefulset.yaml.
func statefulSetMemoryLimit(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../deploy/k8s/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)limits:\s*\n\s*memory:\s*(\d+)Mi`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/k8s/statefulset.yaml: no memory limit in Mi")
	}
	mi, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return mi << 20
}
