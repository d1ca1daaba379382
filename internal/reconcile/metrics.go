package reconcile

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// WriteMetrics writes the summary as Prometheus text to path, for
// node_exporter's textfile collector; the file is replaced atomically, so
// a scrape never reads half of it.
func (s *Summary) WriteMetrics(path string, stores []string) error {
	if err := prometheus.WriteToTextfile(path, s.Registry(stores)); err != nil {
		return fmt.Errorf("write metrics file: %w", err)
	}
	return nil
}

// Registry holds the summary as gauges, to write to a file or push to a
// Pushgateway. Every store and class gets a series, zeros included, so an
// alert can tell "no discrepancies" from "no run".
func (s *Summary) Registry(stores []string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	found := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "projector_reconcile_discrepancies",
		Help: "Discrepancies the last reconcile run found, per class (missing, orphaned, version_skew, withdrawn_present) and store.",
	}, []string{"class", "store"})
	docs := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_reconcile_documents",
		Help: "Decision-store documents the last reconcile run compared.",
	})
	resolved := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_reconcile_resolved",
		Help: "Discrepancies the last reconcile run repaired or deleted.",
	})
	duration := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_reconcile_duration_seconds",
		Help: "Duration of the last reconcile run.",
	})
	last := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_reconcile_last_run_timestamp_seconds",
		Help: "Unix time at which the last reconcile run finished.",
	})
	reg.MustRegister(found, docs, resolved, duration, last)
	for _, st := range stores {
		for _, c := range Classes {
			found.WithLabelValues(string(c), st).Set(float64(s.Found[st][c]))
		}
	}
	docs.Set(float64(s.Documents))
	resolved.Set(float64(s.Resolved))
	duration.Set(s.Duration.Seconds())
	last.Set(float64(s.Started.Add(s.Duration).UnixNano()) / 1e9)
	return reg
}
