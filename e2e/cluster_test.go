package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/testenv"
)

// clusterPartitions is the partition count of the cluster test's topic:
// enough that each broker leads some and each member owns some.
const clusterPartitions = 6

// onCluster puts the world on the three-broker cluster of scripts/services.sh
// (KAFKA_CLUSTER=1) instead of the single broker, with a topic as
// production has it: three replicas, two of which must have a write.
func onCluster() worldOption {
	return func(s *worldSetup) {
		s.brokers = testenv.ClusterBrokers
		s.replication = 3
		s.topicConfig = map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}
	}
}

// TestClusterBrokerFailover runs two members on the three-broker cluster
// while documents flow, SIGKILLs the broker that coordinates their group
// mid-stream and restarts it, twice. With three replicas and two in sync
// for a write, the log loses nothing and takes writes with a broker dead;
// the members follow the new coordinator and partition leaders, one writer
// at a time per partition (the ledger says who wrote what), and every
// store ends exactly as the model says. Then both members stop and a
// replay from the earliest offset is accepted at once: no member that
// could not leave the group after the failover holds it up until its
// session ends. A run over the whole log again leaves every store as it
// was, projecting nothing new.
func TestClusterBrokerFailover(t *testing.T) {
	events := testenv.Size(t, "E2E_CLUSTER_EVENTS", 2000, 100)
	w := newWorld(t, clusterPartitions, onCluster())
	w.waitInSync(2*time.Minute, w.topic)
	rng := rand.New(rand.NewPCG(19, 23))
	h := newHistory(w, rng, events/4)
	m := newModel()
	recs := h.records(m, events)
	// A pause after each graph write keeps the members busy while the
	// brokers die: the stream is consumed during the failovers, not after.
	args := []string{"--batch-records", "20", "--max-poll-records", "100"}
	faults := []string{"PROJECTOR_FAULTS=after-graph=pause:20ms"}
	a := w.start(faults, append(args, "--instance-id", "writer-a")...)
	b := w.start(faults, append(args, "--instance-id", "writer-b")...)

	quarter := len(recs) / 4
	w.produceSlowly(recs[:quarter])
	for kill := range 2 {
		node := w.coordinator()
		name := fmt.Sprintf("kafka-%d", node)
		t.Logf("failover %d: SIGKILL %s, the group's coordinator, leader of partitions %v", kill+1, name, w.ledBy(node))
		service(t, "kill", name)
		// The stream goes on while the broker is down: two replicas in
		// sync are enough for a write once the partitions it led moved.
		start := time.Now()
		w.produceSlowly(recs[quarter*(kill+1) : quarter*(kill+2)])
		t.Logf("failover %d: %d records written with %s down in %s", kill+1, quarter, name, time.Since(start).Round(time.Millisecond))
		service(t, "start", name)
		w.waitInSync(2*time.Minute, w.topic, "__consumer_offsets")
		if now := w.coordinator(); now == node {
			t.Logf("failover %d: the coordinator is %s again", kill+1, name)
		}
	}
	w.produceSlowly(recs[3*quarter:])
	w.waitDrained(a, 5*time.Minute)
	w.requireOwnership(map[string]*proc{"writer-a": a, "writer-b": b})
	a.stop()
	b.stop()
	w.committedEqualsEnd()
	w.checkStores(m)
	w.checkSingleWriterPerPartition()
	before := w.snapshot()

	replayArgs := []string{"--to", "earliest"}
	if w.replayTakesExecute() {
		replayArgs = append(replayArgs, "--execute")
	}
	stdout, stderr, code := w.replay(replayArgs...)
	if code != 0 {
		t.Fatalf("replay %s right after both members stopped = exit %d; want it accepted: a member that could not leave the group after the failover would hold it until its session ends\n%s%s",
			strings.Join(replayArgs, " "), code, stdout, stderr)
	}
	for part, at := range w.groupOffsets() {
		if at != 0 {
			t.Errorf("partition %d committed at %d after the replay, want 0", part, at)
		}
	}

	c := w.start(nil, append(args, "--instance-id", "writer-c")...)
	w.waitDrained(c, 5*time.Minute)
	metrics := c.metrics()
	w.requireOwnership(map[string]*proc{"writer-c": c})
	c.stop()
	w.committedEqualsEnd()
	requireSameSnapshot(t, w.snapshot(), before)
	w.checkStores(m)
	if projected := metrics[`projector_records_total{outcome="projected"}`]; projected != 0 {
		t.Errorf("the replayed run projected %v records, want 0: the stores already held the whole log", projected)
	}
}

// produceSlowly writes records in small batches with pauses, so they flow
// over time rather than at once; a batch waits for its acknowledgements
// (all in-sync replicas), for as long as a failover takes.
func (w *world) produceSlowly(recs []*kgo.Record) {
	w.t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), 25)
		w.produce(recs[:n]...)
		recs = recs[n:]
		time.Sleep(20 * time.Millisecond)
	}
}

// coordinator returns the node id of the broker that coordinates the
// world's group; node N of the cluster is the service kafka-N.
func (w *world) coordinator() int32 {
	w.t.Helper()
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp := w.adm.FindGroupCoordinators(ctx, w.group)[w.group]
		cancel()
		if resp.Err == nil {
			return resp.NodeID
		}
		last = resp.Err
	}
	w.t.Fatalf("no coordinator for group %s within a minute: %v", w.group, last)
	return -1
}

// ledBy returns the partitions of the world's topic that node leads.
func (w *world) ledBy(node int32) []int32 {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := w.adm.ListTopics(ctx, w.topic)
	if err != nil {
		w.t.Fatal(err)
	}
	var led []int32
	for _, p := range topics[w.topic].Partitions.Sorted() {
		if p.Leader == node {
			led = append(led, p.Partition)
		}
	}
	return led
}

// waitInSync waits until every partition of the topics (the world's, the
// group offsets') has all three replicas in sync, as a rolling restart
// waits before it stops the next broker: killing one while another still
// catches up would leave a partition one replica, below min.insync.replicas.
func (w *world) waitInSync(timeout time.Duration, names ...string) {
	w.t.Helper()
	var behind []string
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		topics, err := w.adm.ListTopicsWithInternal(ctx, names...)
		cancel()
		behind = behind[:0]
		if err != nil {
			behind = append(behind, err.Error())
		}
		for _, td := range topics.Sorted() {
			if td.Err != nil {
				behind = append(behind, fmt.Sprintf("%s: %v", td.Topic, td.Err))
			}
			for _, p := range td.Partitions.Sorted() {
				if len(p.Replicas) != 3 || len(p.ISR) != 3 || p.Err != nil {
					behind = append(behind, fmt.Sprintf("%s/%d replicas %v in sync %v %v", td.Topic, p.Partition, p.Replicas, p.ISR, p.Err))
				}
			}
		}
		if len(behind) == 0 && len(topics) == len(names) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("replicas not all in sync within %s: %s", timeout, strings.Join(behind, "; "))
		}
	}
}

// replayTakesExecute reports whether this build's replay acts only with
// --execute (and previews without it), which a change in flight brings.
func (w *world) replayTakesExecute() bool {
	w.t.Helper()
	stdout, stderr, _ := w.cli("replay", "--help")
	return strings.Contains(stdout+stderr, "-execute")
}

// requireOwnership checks the consumers' ownership metrics, when this
// build has them (projector_partitions_owned, _partition_assignments_total,
// _partition_revocations_total): after the failovers every partition has
// exactly one owner, each member owns some and was assigned some, and none
// lost a partition: a broker's death, even the coordinator's, ends no
// member's session (the group outlives it, 45 s against the ~10 s the
// cluster takes to fence a dead broker), so it must not look like one.
// What each was assigned, revoked and lost is logged.
func (w *world) requireOwnership(members map[string]*proc) {
	w.t.Helper()
	owned, found := 0.0, false
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	slices.Sort(names)
	topic := fmt.Sprintf("{topic=%q}", w.topic)
	for _, name := range names {
		m := members[name].metrics()
		n, ok := m["projector_partitions_owned"+topic]
		if !ok {
			continue
		}
		found = true
		owned += n
		assigned := m["projector_partition_assignments_total"+topic]
		revoked := m[fmt.Sprintf("projector_partition_revocations_total{how=%q,topic=%q}", "revoked", w.topic)]
		lost := m[fmt.Sprintf("projector_partition_revocations_total{how=%q,topic=%q}", "lost", w.topic)]
		w.t.Logf("%s owns %v partitions: %v assigned, %v revoked, %v lost", name, n, assigned, revoked, lost)
		if n < 1 || assigned < 1 {
			w.t.Errorf("%s owns %v partitions after %v assignments, want some of each", name, n, assigned)
		}
		if lost != 0 {
			w.t.Errorf("%s lost %v partitions, want none: the failovers cost it its session", name, lost)
		}
	}
	if !found {
		w.t.Logf("this build exports no projector_partitions_owned: ownership not checked")
		return
	}
	if owned != clusterPartitions {
		w.t.Errorf("the members own %v partitions together, want each of the %d once", owned, clusterPartitions)
	}
}
