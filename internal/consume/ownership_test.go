package consume

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/health"
)

// The ownership series exist, at zero, before the member joins, so that a
// member that owns nothing says so rather than saying nothing (and a rate
// over a counter's first increase sees it).
func TestOwnershipMetricsStartAtZero(t *testing.T) {
	c := newCluster(t, 1, 0)
	reg := prometheus.NewRegistry()
	cons, err := New(Config{Topic: testTopic, Group: "zero"}, zap.NewNop(), reg, health.New(),
		handlerFunc(func(context.Context, []*kgo.Record) error { return nil }), nil, kgo.SeedBrokers(c.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.cl.Close()
	defer cons.cancelWork()
	defer cons.abortClient()
	for name, want := range map[string]int{
		"projector_partitions_owned":            1,
		"projector_partition_assignments_total": 1,
		"projector_partition_revocations_total": 2, // how = revoked and lost
		"projector_topic_partitions":            1,
	} {
		if got := testutil.CollectAndCount(reg, name); got != want {
			t.Errorf("%s: %d series before the member joined, want %d at zero", name, got, want)
		}
	}
	if got := testutil.ToFloat64(cons.m.revocations.WithLabelValues(testTopic, lostSession)); got != 0 {
		t.Errorf("projector_partition_revocations_total{how=\"lost\"} = %v, want 0", got)
	}
}

// A second member takes some of the first one's partitions, and the first
// takes them all back when the second stops: each member's gauge says what
// it owns, the two add up to the topic's partitions, and the counters count
// every partition that came and went.
func TestOwnershipFollowsTheAssignment(t *testing.T) {
	const partitions = 4
	c := newCluster(t, partitions, 1)
	idle := handlerFunc(func(context.Context, []*kgo.Record) error { return nil })
	fast := func(cfg *Config) { cfg.LagInterval = 50 * time.Millisecond }
	owned := func(m *member) float64 { return testutil.ToFloat64(m.c.m.owned.WithLabelValues(testTopic)) }
	assigned := func(m *member) float64 { return testutil.ToFloat64(m.c.m.assignments.WithLabelValues(testTopic)) }
	revoked := func(m *member) float64 {
		return testutil.ToFloat64(m.c.m.revocations.WithLabelValues(testTopic, revokedCleanly))
	}

	first := c.startWith("owners", idle, fast)
	waitFor(t, "the first member owning every partition", func() bool { return owned(first) == partitions })
	if got := assigned(first); got != partitions {
		t.Errorf("first member: %v partitions assigned, want %d", got, partitions)
	}
	waitFor(t, "the topic's partition count", func() bool {
		return testutil.ToFloat64(first.c.m.partitions.WithLabelValues(testTopic)) == partitions
	})

	second := c.startWith("owners", idle, fast)
	waitFor(t, "the partitions shared by the two members", func() bool {
		return owned(second) > 0 && owned(first)+owned(second) == partitions
	})
	moved := owned(second)
	if got := revoked(first); got != moved {
		t.Errorf("first member: %v partitions revoked, want the %v the second member took", got, moved)
	}
	if got := assigned(second); got != moved {
		t.Errorf("second member: %v partitions assigned, want %v", got, moved)
	}

	second.stop()
	waitFor(t, "the first member owning every partition again", func() bool { return owned(first) == partitions })
	if got, want := assigned(first), partitions+moved; got != want {
		t.Errorf("first member: %v partitions assigned in all, want %v (its first %d and the %v back)", got, want, partitions, moved)
	}
	if got := testutil.ToFloat64(first.c.m.revocations.WithLabelValues(testTopic, lostSession)); got != 0 {
		t.Errorf("first member: %v partitions lost, want 0", got)
	}
}
