package kafkametrics

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A client's gauges of buffered records are exported without the _total
// of a counter, and every other kprom metric under its own name (issue 28:
// projector_kafka_buffered_fetch_records_total was a gauge).
func TestBufferedRecordGaugesHaveNoTotalSuffix(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := prometheus.NewRegistry()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(Metrics("projector_kafka", reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if strings.HasSuffix(f.GetName(), "_total") && f.GetType().String() == "GAUGE" {
			t.Errorf("%s is a gauge named like a counter", f.GetName())
		}
	}
	for _, want := range []string{"projector_kafka_buffered_fetch_records", "projector_kafka_buffered_produce_records",
		"projector_kafka_buffered_fetch_bytes", "projector_kafka_connects_total", "projector_kafka_produce_bytes_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("gathered %v, want %s among them", names, want)
		}
	}
}
