package consume

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector/projector/internal/project"
)

type metrics struct {
	lag           *prometheus.GaugeVec
	halted        *prometheus.GaugeVec
	halts         *prometheus.CounterVec
	commitSeconds prometheus.Histogram
	commitErrors  prometheus.Counter
	fetchErrors   prometheus.Counter
	fenceTimeouts prometheus.Counter

	// The ownership of partitions: what this member owns now, and how
	// often partitions came and went. Written by the group callbacks only.
	owned       *prometheus.GaugeVec
	assignments *prometheus.CounterVec
	revocations *prometheus.CounterVec
	// partitions is the partition count of the topic as the brokers last
	// told the lag refresh; beside the sum of owned over the members it
	// shows a partition that no member owns.
	partitions *prometheus.GaugeVec
}

// The values of the how label of projector_partition_revocations_total.
const (
	revokedCleanly = "revoked" // given up in a rebalance, after its batches were finished or cancelled
	lostSession    = "lost"    // taken away with the group session, without a revoke
)

func newMetrics(reg prometheus.Registerer, topic string, pendingAges func() map[partitionKey]float64) *metrics {
	m := &metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "projector_consumer_lag",
			Help: "Records between the last committed offset and the partition's high watermark, per assigned partition.",
		}, []string{"topic", "partition"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "projector_partition_halted",
			Help: "1 while a partition is halted: by the fence mismatch policy halt, a dead letter the topic refuses for good, or an error its batch cannot be retried past (projector_partition_halts_total says which).",
		}, []string{"topic", "partition"}),
		halts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_partition_halts_total",
			Help: "Partitions halted, by reason: fence_mismatch (the fence mismatch policy halt), dead_letter_refused (the dead-letter topic refuses a letter permanently), handle_error (an error the batch cannot be retried past) or fenced (a store refused the batch: the partition has a newer writer).",
		}, []string{"reason"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_commit_seconds",
			Help:    "Time of one offset commit.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_commit_errors_total",
			Help: "Offset commits that failed; their records are delivered again.",
		}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_fetch_errors_total",
			Help: "Fetch errors reported by the Kafka client after its own retries.",
		}),
		fenceTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "projector_fence_acquire_timeouts_total",
			Help: "Attempts to take an assigned partition's fencing token that timed out: an earlier writer still held the partition (one stopped inside its relational transaction holds it until the store ends its session); each is retried.",
		}),
	}
	m.owned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "projector_partitions_owned",
		Help: "Partitions of the topic this member owns now: assigned, and not yet revoked or lost. Summed over the members it is the topic's partition count, except during a rebalance or while a partition is owned by no one.",
	}, []string{"topic"})
	m.assignments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "projector_partition_assignments_total",
		Help: "Partitions assigned to this member, one per partition per assignment: a failover or a rebalance that moves partitions here counts them.",
	}, []string{"topic"})
	m.revocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "projector_partition_revocations_total",
		Help: "Partitions this member gave up, by how: revoked (in a rebalance, after finishing or cancelling its batches) or lost (with the group session, the batches cancelled at once).",
	}, []string{"topic", "how"})
	m.partitions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "projector_topic_partitions",
		Help: "Partitions of the topic, as the brokers last told this member (every few seconds, with the end offsets of the lag); 0 until they first answer.",
	}, []string{"topic"})
	m.owned.WithLabelValues(topic)
	m.assignments.WithLabelValues(topic)
	m.revocations.WithLabelValues(topic, revokedCleanly)
	m.revocations.WithLabelValues(topic, lostSession)
	m.partitions.WithLabelValues(topic)
	oldest := &ageCollector{ages: pendingAges, desc: prometheus.NewDesc("projector_oldest_uncommitted_age_seconds",
		"Age of the oldest record not yet committed, per assigned partition, from its receipt, or from the partition's assignment for a backlog not received yet; 0 when none. A growing value is a stuck partition.",
		[]string{"topic", "partition"}, nil)}
	for _, r := range project.HaltReasons() {
		m.halts.WithLabelValues(string(r))
	}
	reg.MustRegister(m.lag, m.halted, m.halts, m.commitSeconds, m.commitErrors, m.fetchErrors, m.fenceTimeouts, oldest,
		m.owned, m.assignments, m.revocations, m.partitions)
	return m
}

// ageCollector exports the age of each assigned partition's oldest
// uncommitted record, read at scrape time, so the series follow the
// assignment without being created or forgotten.
type ageCollector struct {
	desc *prometheus.Desc
	ages func() map[partitionKey]float64
}

func (a *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *ageCollector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range a.ages() {
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, v, k.topic, strconv.Itoa(int(k.partition)))
	}
}

// forget drops the series of a partition this member no longer owns.
func (m *metrics) forget(topic string, partition int32) {
	p := strconv.Itoa(int(partition))
	m.lag.DeleteLabelValues(topic, p)
	m.halted.DeleteLabelValues(topic, p)
}
