// Package kafkametrics adapts the Kafka client's metrics (franz-go's
// kprom) to the Prometheus naming rules the projector keeps: kprom names
// two gauges, the records buffered for fetching and for producing, with the
// _total suffix of a counter, which makes rate() look right on them and
// breaks every linter and recording rule that trusts the suffix. Metrics
// registers kprom through a Registerer that drops the suffix from those two.
package kafkametrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/plugin/kprom"
)

// gauges are the kprom gauges whose names end in _total, after the
// namespace; they lose the suffix.
var gauges = []string{"_buffered_fetch_records_total", "_buffered_produce_records_total"}

// Metrics returns kprom's hooks for a client, its metrics named
// namespace_..., registered on reg with the gauges renamed.
func Metrics(namespace string, reg prometheus.Registerer) *kprom.Metrics {
	return kprom.NewMetrics(namespace, kprom.Registerer(renaming{reg}))
}

// renaming registers collectors on its Registerer, renaming the gauges.
type renaming struct{ prometheus.Registerer }

func (r renaming) Register(c prometheus.Collector) error {
	return r.Registerer.Register(rename(c))
}

func (r renaming) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Registerer.MustRegister(rename(c))
	}
}

func (r renaming) Unregister(c prometheus.Collector) bool {
	return r.Registerer.Unregister(rename(c))
}

// rename returns c, or, when c is a gauge function of gauges, a collector
// of the same value under the name without _total. kprom registers each
// gauge function as a collector of its own, with one Desc; the projector
// gives it no constant labels (kprom.WithStaticLabel), so none are kept.
func rename(c prometheus.Collector) prometheus.Collector {
	g, ok := c.(prometheus.GaugeFunc)
	if !ok {
		return c
	}
	ch := make(chan *prometheus.Desc, 1)
	g.Describe(ch)
	d := <-ch
	name := fqName(d)
	for _, suffix := range gauges {
		if strings.HasSuffix(name, suffix) {
			return &renamed{inner: g, desc: prometheus.NewDesc(strings.TrimSuffix(name, "_total"), help(d), nil, nil)}
		}
	}
	return c
}

// renamed is a gauge function under another name.
type renamed struct {
	inner prometheus.GaugeFunc
	desc  *prometheus.Desc
}

func (r *renamed) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *renamed) Collect(ch chan<- prometheus.Metric) {
	var m dto.Metric
	if err := r.inner.Write(&m); err != nil {
		ch <- prometheus.NewInvalidMetric(r.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, m.GetGauge().GetValue())
}

// fqName and help read a Desc's name and help, which it prints and does
// not otherwise expose: Desc{fqName: "...", help: "...", ...}.
func fqName(d *prometheus.Desc) string { return field(d.String(), "fqName: ") }
func help(d *prometheus.Desc) string   { return field(d.String(), "help: ") }

func field(s, key string) string {
	_, rest, ok := strings.Cut(s, key+`"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `", `)
	return v
}
