package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/projector/projector/internal/retry"
)

// exitPushFailed is the status of a batch command that did its work and
// could not push the result to the Pushgateway, even after retrying: the
// work is done, so the CronJob fails the Job at once rather than running
// it all again (podFailurePolicy), and the last-run timestamp ages.
const exitPushFailed = 6

// pushFlags send a batch command's result to a Prometheus Pushgateway: a
// CronJob's pod is gone before Prometheus could scrape it, and has no
// node_exporter textfile directory of its own.
type pushFlags struct {
	url string
	job string
	// tries is how often a push is attempted, waiting backoff between
	// them; a Pushgateway restarting or a network blip should not cost
	// the result.
	tries   int
	backoff retry.Policy
}

func (p *pushFlags) register(fs *flag.FlagSet, job string) {
	fs.StringVar(&p.url, "push-url", "", "Prometheus Pushgateway to push the result to when the run succeeds (e.g. http://pushgateway:9091), retried for about a minute; a failed run pushes nothing, so the last-run timestamp ages, and a run whose push fails exits with status 6")
	fs.StringVar(&p.job, "push-job", job, "job label of the pushed metrics; each push replaces the previous one of the job")
	p.tries, p.backoff = 6, retry.Policy{Min: 2 * time.Second, Max: 30 * time.Second}
}

// push replaces the metrics of the job on the Pushgateway with reg's,
// trying again after a failure. A push that never succeeds is an
// *exitError of status exitPushFailed: the command's work is done, and
// only its report is lost.
func (p *pushFlags) push(ctx context.Context, reg prometheus.Gatherer) error {
	if p.url == "" {
		return nil
	}
	var err error
	for attempt := range max(p.tries, 1) {
		if attempt > 0 {
			if serr := retry.Sleep(ctx, p.backoff.Delay(attempt-1)); serr != nil {
				break
			}
		}
		if err = push.New(p.url, p.job).Gatherer(reg).PushContext(ctx); err == nil {
			return nil
		}
	}
	return &exitError{code: exitPushFailed, err: fmt.Errorf("push the result to %s (the run itself succeeded; its result is lost): %w", p.url, err)}
}
