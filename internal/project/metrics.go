package project

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector/projector/internal/event"
)

// metrics are the projector's own series; the fence and the consumer
// register theirs.
type metrics struct {
	records     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	storeWrite  *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	limitErrors *prometheus.CounterVec
	fenced      *prometheus.CounterVec
	// settled counts the points the settles changed, by action; settles
	// the settles run, by result.
	settled      *prometheus.CounterVec
	settles      *prometheus.CounterVec
	batchRecords prometheus.Histogram
	batchSeconds prometheus.Histogram
	fenceSeconds prometheus.Histogram
	embedSeconds prometheus.Histogram
}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_records_total",
			Help: "Records handled, by outcome (projected, redelivered, stale, withdrawn, conflict, dlq).",
		}, []string{"outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_dlq_total",
			Help: "Records written to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		storeWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "projector_store_write_seconds",
			Help:    "Time of one successful batch write to a store (index, graph, relational).",
			Buckets: latencyBuckets,
		}, []string{"store"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_store_errors_total",
			Help: "Failed store calls, by store and kind (transient, rejected, fatal, limit); each retry counts.",
		}, []string{"store", "kind"}),
		limitErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_store_limit_errors_total",
			Help: "Store calls refused for a limit of the store, not of a record (kind limit), by store and the limit's name; each retry counts.",
		}, []string{"store", "limit"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_fenced_writes_total",
			Help: "Batches a store refused because their partition has a newer writer (another member was assigned it), by the store that refused.",
		}, []string{"store"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_index_settled_points_total",
			Help: "Index points a settle changed after a partition changed hands, by action: removed (a late write of an earlier owner, or of one that died, that the relational store does not hold) or restored (a current chunk missing or of another event).",
		}, []string{"action"}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_index_settles_total",
			Help: "Settles of the index after taking a partition, by result: clean (nothing to change), changed, or failed (given up: the partition was lost or the service stopped).",
		}, []string{"result"}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_batch_records",
			Help:    "Records per handled batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_batch_seconds",
			Help:    "Time to handle a batch: decode, writes, fences and dead letters, before the commit.",
			Buckets: latencyBuckets,
		}),
		fenceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_fence_seconds",
			Help:    "Time spent in fences per batch.",
			Buckets: latencyBuckets,
		}),
		embedSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_embed_seconds",
			Help:    "Time spent computing vectors per batch.",
			Buckets: latencyBuckets,
		}),
	}
	for _, a := range []string{settleRemoved, settleRestored} {
		m.settled.WithLabelValues(a)
	}
	for _, r := range []string{settleClean, settleChanged, settleFailed} {
		m.settles.WithLabelValues(r)
	}
	for _, o := range []Outcome{OutcomeProjected, OutcomeRedelivered, OutcomeStale, OutcomeWithdrawn, OutcomeConflict, OutcomeDLQ} {
		m.records.WithLabelValues(string(o))
	}
	// Every series exists from the start at zero, so the first event of
	// each kind shows in increase() and rate().
	for _, s := range []string{StoreIndex, StoreGraph, StoreRelational} {
		m.storeWrite.WithLabelValues(s)
		m.fenced.WithLabelValues(s)
		for _, k := range []ErrorKind{Transient, Rejected, Fatal, Limit} {
			m.storeErrors.WithLabelValues(s, k.String())
		}
	}
	for _, r := range append(event.Reasons(), ReasonVersionConflict, ReasonFenceMismatch, ReasonStoreRejected, ReasonInvalidPosition) {
		m.deadLetters.WithLabelValues(string(r))
	}
	reg.MustRegister(m.records, m.deadLetters, m.storeWrite, m.storeErrors, m.limitErrors, m.fenced, m.settled, m.settles, m.batchRecords, m.batchSeconds, m.fenceSeconds, m.embedSeconds)
	return m
}
