package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/projector/projector/internal/testenv"
)

// servicesScript is scripts/services.sh of the checkout whose services the
// tests use; E2E_SERVICES_SCRIPT overrides it.
func servicesScript() string {
	if s := os.Getenv("E2E_SERVICES_SCRIPT"); s != "" {
		return s
	}
	return "../scripts/services.sh"
}

// service runs scripts/services.sh <verb> <name>, e.g. to stop PostgreSQL.
func service(t *testing.T, verb, name string) {
	t.Helper()
	out, err := exec.Command(servicesScript(), verb, name).CombinedOutput()
	if err != nil {
		t.Fatalf("services.sh %s %s: %v\n%s", verb, name, err, out)
	}
}

// useOwnQdrant points the world at a real Qdrant server of this test's own,
// which the test can kill and start again with its data on disk without
// touching the server that the other tests share.
func (w *world) useOwnQdrant() *testenv.Qdrant {
	w.t.Helper()
	q := testenv.StartQdrant(w.t)
	w.qdrantAddr = q.Addr()
	_ = w.qd.Close()
	var err error
	w.qd, err = qdrant.NewClient(&qdrant.Config{Host: "127.0.0.1", Port: q.GRPCPort, SkipCompatibilityCheck: true})
	if err != nil {
		w.t.Fatal(err)
	}
	return q
}

// TestStoreOutages stops each store for a while under a steady stream: the
// service must report not ready, commit nothing while the store is down,
// log the outage once rather than per retry, resume by itself, and end
// with exactly the state of the model.
func TestStoreOutages(t *testing.T) {
	outage := time.Duration(testenv.Size(t, "E2E_OUTAGE_SECONDS", 20, 0)) * time.Second
	w := newWorld(t, 3)
	qd := w.useOwnQdrant()
	rng := rand.New(rand.NewPCG(7, 11))
	h := newHistory(w, rng, 200)
	m := newModel()

	p := w.start(nil, "--batch-records", "25")
	stopPublishing := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	stop := func() {
		stopOnce.Do(func() { close(stopPublishing) })
		wg.Wait()
	}
	// A failure that ends the test early stops the publisher too, before
	// the test is over: it reports through t.
	t.Cleanup(stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopPublishing:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ev := h.next()
			m.apply(ev)
			rec := ev.record()
			rec.Topic = w.topic
			if err := w.kcl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
		}
	}()

	outages := []struct {
		store     string
		component string
		stop      func()
		start     func()
	}{
		{"postgres", "relational", func() { service(t, "stop", "postgres") }, func() { service(t, "start", "postgres") }},
		{"neo4j", "graph", func() { service(t, "stop", "neo4j") }, func() { service(t, "start", "neo4j") }},
		// Killed, as a crash would, and started without waiting: the
		// projector meets the window in which Qdrant loads its collections
		// from disk with its ports still closed, and must wait it out; what
		// Qdrant acknowledged before the kill must still be there.
		{"qdrant", "index", qd.Kill, qd.Start},
	}
	for _, o := range outages {
		time.Sleep(3 * time.Second)
		o.stop()
		waitFor(t, 30*time.Second, "readyz to report "+o.component, func() bool {
			code, body := p.get("/readyz")
			return code == 503 && strings.Contains(body, o.component)
		})
		if got := p.metrics()["projector_ready"]; got != 0 {
			t.Errorf("%s down: projector_ready = %v, want 0", o.store, got)
		}
		time.Sleep(time.Second)
		before := w.committed()
		// Nothing is polled while the store is down, but documents keep
		// arriving: the lag gauge must keep up with them. Near the end of
		// the outage it must be at least the broker's lag of a few of its
		// refreshes earlier.
		const lagLead = 8 * time.Second
		brokerLag := int64(-1)
		if outage > 2*lagLead {
			time.Sleep(outage - lagLead)
			brokerLag, _ = w.lag()
			time.Sleep(lagLead)
		} else {
			time.Sleep(outage)
		}
		if brokerLag > 0 {
			gauge := 0.0
			for _, v := range series(p.metrics(), "projector_consumer_lag") {
				gauge += v
			}
			if gauge < float64(brokerLag) {
				t.Errorf("%s down: projector_consumer_lag sums to %v, want at least the broker's lag of %v s earlier, %d", o.store, gauge, lagLead.Seconds(), brokerLag)
			}
		}
		if after := w.committed(); !sameOffsets(before, after) {
			t.Errorf("%s down: committed offsets moved from %v to %v, want no commit while a store is down", o.store, before, after)
		}
		o.start()
		waitFor(t, 2*time.Minute, "readyz after "+o.store+" is back", func() bool {
			code, _ := p.get("/readyz")
			return code == 200
		})
	}
	stop()
	w.waitDrained(p, 3*time.Minute)
	p.stop()
	w.checkStores(m)

	// One line when an outage starts, not one per retry: each retry loop
	// that meets the outage says it once. The store's writes meet it, or
	// the fences reading the store, or both: which comes first depends on
	// where the batches are when the store goes.
	log := p.log.String()
	for _, o := range outages {
		failing := map[string]int{}
		for _, line := range scanLines(log) {
			if !strings.Contains(line, "failing; retrying") {
				continue
			}
			switch {
			case strings.Contains(line, `"component":"`+o.component+`"`):
				failing[o.component]++
			case strings.Contains(line, `"component":"fence"`) && strings.Contains(line, `"error":"`+o.component+` fence:`):
				failing["fence"]++
			}
		}
		if len(failing) == 0 || failing[o.component] > 1 || failing["fence"] > 1 {
			t.Errorf("%s outage: 'failing; retrying' log lines by component %v, want one from the writes or the fences or one from each", o.store, failing)
		}
	}
}

// committed returns the group's committed offset per partition.
func (w *world) committed() map[int32]int64 {
	w.t.Helper()
	offsets, err := w.adm.FetchOffsets(context.Background(), w.group)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[int32]int64{}
	offsets.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
	return out
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if b[p] != o {
			return false
		}
	}
	return true
}
