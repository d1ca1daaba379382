package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// pushFlags send a batch command's result to a Prometheus Pushgateway: a
// CronJob's pod is gone before Prometheus could scrape it, and has no
// node_exporter textfile directory of its own.
type pushFlags struct {
	url string
	job string
}

func (p *pushFlags) register(fs *flag.FlagSet, job string) {
	fs.StringVar(&p.url, "push-url", "", "Prometheus Pushgateway to push the result to when the run succeeds (e.g. http://pushgateway:9091); a failed run pushes nothing, so the last-run timestamp ages")
	fs.StringVar(&p.job, "push-job", job, "job label of the pushed metrics; each push replaces the previous one of the job")
}

// push replaces the metrics of the job on the Pushgateway with reg's.
func (p *pushFlags) push(ctx context.Context, reg prometheus.Gatherer) error {
	if p.url == "" {
		return nil
	}
	if err := push.New(p.url, p.job).Gatherer(reg).PushContext(ctx); err != nil {
		return fmt.Errorf("push the result to %s: %w", p.url, err)
	}
	return nil
}
