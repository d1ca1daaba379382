package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/projector/projector/internal/store/index"
)

// TestObservability runs the projector the way an operator watches it and
// holds the deployment's observability files to what it exports: every
// metric a dashboard panel or an alert queries, and every metric
// docs/metrics.md describes, must be in a real scrape, and every metric of
// the scrape must be described. A first run projects good documents and a
// bad one; a second one halts a partition on a fence mismatch, which is the
// only way to see the metrics of that path.
func TestObservability(t *testing.T) {
	w := newWorld(t, 3)
	traceTopic := w.topic + ".trace"
	if _, err := w.adm.CreateTopic(context.Background(), 1, 1, nil, traceTopic); err != nil {
		t.Fatalf("create trace topic: %v", err)
	}
	t.Cleanup(func() { _, _ = w.adm.DeleteTopics(context.Background(), traceTopic) })

	const good = 6
	var lines []string
	for i := range good {
		d := doc{Key: w.key(fmt.Sprintf("doc-%d", i)), Version: 1, Title: "Observed", UseText: true, Text: fmt.Sprintf("Document %d, watched.", i)}
		lines = append(lines, string(d.value()))
	}
	lines = append(lines, fmt.Sprintf(`{"document_key":%q,"version":0,"text":"version 0 is bad input"}`, w.key("bad")))
	w.publishFile(lines)

	p := w.start(nil, "--trace-topic", traceTopic)
	w.waitDrained(p, 2*time.Minute)
	// The gauges follow the commit by a moment: the lag is set right after
	// it, the pending batch is forgotten right after that. Every owned
	// partition has both from its assignment, one without records too.
	m := p.waitMetrics(30*time.Second, "a ready projector with no lag and no record pending", func(m map[string]float64) bool {
		lags := series(m, "projector_consumer_lag")
		ages := series(m, "projector_oldest_uncommitted_age_seconds")
		if len(lags) != w.partitions || len(ages) != w.partitions || m["projector_ready"] != 1 {
			return false
		}
		for _, v := range ages {
			if v != 0 {
				return false
			}
		}
		for _, v := range lags {
			if v != 0 {
				return false
			}
		}
		return true
	})
	checks := []struct {
		sample string
		ok     func(float64) bool
		want   string
	}{
		{`projector_records_total{outcome="projected"}`, func(v float64) bool { return v == good }, fmt.Sprint(good)},
		{`projector_records_total{outcome="dlq"}`, func(v float64) bool { return v == 1 }, "1"},
		{`projector_dlq_total{reason="invalid_version"}`, func(v float64) bool { return v == 1 }, "1"},
		{`projector_fence_checks_total{store="index"}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`projector_fence_checks_total{store="graph"}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`projector_fence_checks_total{store="relational"}`, func(v float64) bool { return v > 0 }, "> 0"},
		{`projector_fence_mismatches_total{store="index"}`, func(v float64) bool { return v == 0 }, "0"},
	}
	for _, c := range checks {
		if v, ok := m[c.sample]; !ok || !c.ok(v) {
			t.Errorf("after draining: %s = %v (present %v), want %s", c.sample, v, ok, c.want)
		}
	}
	families := p.families()
	p.stop()

	// A fence mismatch that re-projection cannot fix, with the halt policy:
	// the index drops the document's writes.
	w.publishFile([]string{string(doc{Key: w.key("dropped"), Version: 1, Title: "Lost", Chunks: []string{"never indexed"}}.value())})
	// This run also embeds through an HTTP endpoint, so the embedder's own
	// metrics are scraped too (into a collection of the endpoint's size).
	embedder := newEmbedServer(t, 0)
	t.Cleanup(func() { _ = index.DropCollections(context.Background(), w.qd, w.collection+"_http") })
	p = w.start(append([]string{"PROJECTOR_FAULTS=drop-index=" + w.key("dropped")}, embedEnv...),
		embedder.embedArgs("--on-fence-mismatch", "halt", "--trace-topic", traceTopic, "--qdrant-collection", w.collection+"_http")...)
	m = p.waitMetrics(2*time.Minute, "a halted partition", func(m map[string]float64) bool {
		for _, v := range series(m, "projector_partition_halted") {
			if v == 1 {
				return true
			}
		}
		return false
	})
	if m["projector_ready"] != 0 || m[`projector_fence_mismatches_total{store="index"}`] == 0 {
		t.Errorf("halted: projector_ready = %v, index fence mismatches = %v; want 0 and > 0",
			m["projector_ready"], m[`projector_fence_mismatches_total{store="index"}`])
	}
	if code, body := p.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("halted: /readyz = %d %q, want 503", code, body)
	}
	for name := range p.families() {
		families[name] = true
	}
	p.stop()
	// The reconcile results come from `projector reconcile`, whose
	// metrics file a textfile collector or a Pushgateway serves.
	metricsFile := filepath.Join(t.TempDir(), "reconcile.prom")
	if _, stderr, code := w.cli(append([]string{"reconcile", "--key-prefix", w.prefix, "--metrics-file", metricsFile,
		"--max-discrepancies", "1000"}, w.storeFlags()...)...); code != 0 {
		t.Fatalf("projector reconcile: exit %d\n%s", code, stderr)
	}
	f, err := os.Open(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	reconciled, err := parser.TextToMetricFamilies(f)
	_ = f.Close()
	if err != nil {
		t.Fatalf("parse %s: %v", metricsFile, err)
	}
	for name := range reconciled {
		families[name] = true
	}
	// ledger-prune pushes its result to a Pushgateway; this one keeps
	// the names of what it was sent.
	var (
		mu     sync.Mutex
		pushed []string
	)
	gateway := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		for {
			var mf dto.MetricFamily
			if dec.Decode(&mf) != nil {
				break
			}
			mu.Lock()
			pushed = append(pushed, mf.GetName())
			mu.Unlock()
		}
		rw.WriteHeader(http.StatusOK)
	}))
	defer gateway.Close()
	if _, stderr, code := w.cli("ledger-prune", "--postgres-schema", w.schema, "--push-url", gateway.URL); code != 0 {
		t.Fatalf("projector ledger-prune: exit %d\n%s", code, stderr)
	}
	mu.Lock()
	for _, name := range pushed {
		families[name] = true
	}
	mu.Unlock()

	t.Run("dashboard and alerts", func(t *testing.T) {
		for _, q := range queries(t) {
			for _, name := range promqlNames(q.expr) {
				if name != "up" && !exported(t, families, name) {
					t.Errorf("%s queries %s, which the projector does not export", q.where, name)
				}
			}
		}
	})
	t.Run("docs/metrics.md", func(t *testing.T) {
		b, err := os.ReadFile("../docs/metrics.md")
		if err != nil {
			t.Fatal(err)
		}
		docs := string(b)
		for _, m := range documentedName.FindAllStringSubmatch(docs, -1) {
			if !exported(t, families, m[1]) {
				t.Errorf("docs/metrics.md describes %s, which the projector does not export", m[1])
			}
		}
		for name := range families {
			if strings.HasPrefix(name, "projector_") && !documented(docs, name) {
				t.Errorf("the projector exports %s, which docs/metrics.md does not describe", name)
			}
		}
	})
}

// TestDemoFillsDashboard runs the sample publisher of `make demo`
// (deploy/demo.sh) against the real broker and checks that it moves every
// series the dashboard splits by outcome and dead-letter reason.
func TestDemoFillsDashboard(t *testing.T) {
	w := newWorld(t, 3)
	demo := exec.Command("sh", "../deploy/demo.sh")
	demo.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"),
		"PROJECTOR_BROKERS="+w.brokers, "PROJECTOR_TOPIC="+w.topic,
		"DEMO_PREFIX="+w.key("demo"), "DEMO_ROUNDS=3", "DEMO_INTERVAL=0", "DEMO_DOCUMENTS=10")
	if out, err := demo.CombinedOutput(); err != nil {
		t.Fatalf("deploy/demo.sh: %v\n%s", err, out)
	}
	p := w.start(nil)
	w.waitDrained(p, 2*time.Minute)
	m := p.metrics()
	p.stop()
	for _, s := range []string{
		`projector_records_total{outcome="projected"}`,
		`projector_records_total{outcome="redelivered"}`,
		`projector_records_total{outcome="stale"}`,
		`projector_records_total{outcome="withdrawn"}`,
		`projector_records_total{outcome="conflict"}`,
		`projector_records_total{outcome="dlq"}`,
		`projector_dlq_total{reason="invalid_version"}`,
		`projector_dlq_total{reason="invalid_op"}`,
		`projector_dlq_total{reason="ambiguous_content"}`,
		`projector_dlq_total{reason="version_conflict"}`,
	} {
		if m[s] == 0 {
			t.Errorf("after 3 demo rounds %s = %v, want > 0", s, m[s])
		}
	}
}

// waitMetrics scrapes until cond holds, failing after timeout or when the
// process exits. It waits for the HTTP server too, which starts once the
// stores are prepared.
func (p *proc) waitMetrics(timeout time.Duration, what string, cond func(map[string]float64) bool) map[string]float64 {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for {
		if code, body := p.get("/metrics"); code == http.StatusOK {
			m := parseMetrics(p.t, strings.NewReader(body))
			if cond(m) {
				return m
			}
			last = last[:0]
			for k, v := range m {
				if strings.HasPrefix(k, "projector_") && !strings.HasPrefix(k, "projector_kafka_") {
					last = append(last, fmt.Sprintf("%s %v", k, v))
				}
			}
		}
		if p.exited() {
			p.t.Fatalf("projector exited waiting for %s: %v", what, p.err)
		}
		if time.Now().After(deadline) {
			slices.Sort(last)
			p.t.Fatalf("no %s within %s; the last scrape:\n%s", what, timeout, strings.Join(last, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// families returns the names of the metric families of one scrape.
func (p *proc) families() map[string]bool {
	p.t.Helper()
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("GET /metrics = %d %s", code, body)
	}
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("parse metrics: %v", err)
	}
	out := map[string]bool{}
	for name := range parsed {
		out[name] = true
	}
	return out
}

// series returns the samples of one metric, by their full key.
func series(m map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// firstEventOnly are metrics the service creates with their first event (a
// label vector with no series before): no scrape of a healthy run shows
// them, so their declaration in the source stands in for the scrape.
var firstEventOnly = []string{"projector_store_errors_total", "projector_store_limit_errors_total"}

// exported reports whether name is in the scrape: a family, or a sample of
// one (a histogram's _bucket, _sum and _count, a summary's _sum and _count),
// or one of firstEventOnly that the service's source declares.
func exported(t *testing.T, families map[string]bool, name string) bool {
	t.Helper()
	if families[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return true
		}
	}
	return slices.Contains(firstEventOnly, name) && declared(t, name)
}

// declared reports whether a Go file of the service names the metric.
func declared(t *testing.T, name string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir("../internal", func(path string, d os.DirEntry, err error) error {
		if err != nil || found || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		found = err == nil && strings.Contains(string(b), `Name: "`+name+`"`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// documentedName finds the metric names docs/metrics.md describes: written
// as code, with the prefix of the service or of the Go and process
// collectors (a bare prefix such as `projector_kafka_` is no name).
var documentedName = regexp.MustCompile("`((?:projector|go|process)_[a-z0-9_]*[a-z0-9])`")

// kafkaClients are the prefixes of the Kafka clients' kprom metrics, the
// longest first; docs/metrics.md describes those once, by the name after
// the prefix.
var kafkaClients = []string{"projector_kafka_dlq_large_", "projector_kafka_dlq_", "projector_kafka_"}

func documented(docs, name string) bool {
	if strings.Contains(docs, "`"+name+"`") {
		return true
	}
	for _, prefix := range kafkaClients {
		if suffix, ok := strings.CutPrefix(name, prefix); ok {
			return strings.Contains(docs, "`"+suffix+"`")
		}
	}
	return false
}

// query is one PromQL expression of the deployment and where it is.
type query struct {
	where string
	expr  string
}

// queries returns the expressions of every dashboard panel and alert rule.
func queries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, p := range dashboardPanels(t) {
		for _, e := range p.exprs {
			out = append(out, query{"panel " + p.title, e})
		}
	}
	b, err := os.ReadFile("../deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("no queries in the dashboard and alerts")
	}
	return out
}

var (
	// What promqlNames removes before it reads names, in this order: string
	// literals, Grafana variables, label matchers, range and subquery
	// brackets, and the label lists of by, without, on, ignoring and group_*.
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlVariables = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlLabels    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// A token is a number or duration (skipped), or a name, followed by an
	// opening parenthesis when it is a function or an aggregation.
	promqlTokens = regexp.MustCompile(`[0-9][0-9a-zA-Z._]*|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?`)
	// promqlKeywords are the operators and modifiers written as words.
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "atan2", "inf", "nan", "Inf", "NaN"}
)

// promqlNames returns the metric names a PromQL expression selects, sorted
// and without duplicates. It reads the shapes the dashboard and alerts use;
// it is no PromQL parser (promtool checks their syntax in deploy/).
func promqlNames(expr string) []string {
	for _, re := range []*regexp.Regexp{promqlStrings, promqlVariables, promqlMatchers, promqlRanges, promqlLabels} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, m := range promqlTokens.FindAllStringSubmatch(expr, -1) {
		name, call := m[1], m[2]
		if name == "" || call != "" || slices.Contains(promqlKeywords, name) || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func TestPromqlNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (outcome) (rate(projector_records_total{instance=~"$instance"}[$__rate_interval]))`, []string{"projector_records_total"}},
		{`histogram_quantile(0.99, sum by (store, le) (rate(projector_store_write_seconds_bucket[5m])))`, []string{"projector_store_write_seconds_bucket"}},
		{`projector_consumer_lag > 1000 and deriv(projector_consumer_lag[10m]) > 0`, []string{"projector_consumer_lag"}},
		{`absent(up{job="projector"} == 1)`, []string{"up"}},
		{`sum(projector_partition_halted) or vector(0)`, []string{"projector_partition_halted"}},
		{`sum(rate(a_sum[1m])) / sum(rate(a_count[1m])) by (job)`, []string{"a_count", "a_sum"}},
		{`x unless x offset 15m`, []string{"x"}},
		{`go_gc_gomemlimit_bytes{instance=~"${instance}"} < 1e18`, []string{"go_gc_gomemlimit_bytes"}},
		{`a * on (store) group_left (kind) b`, []string{"a", "b"}},
		{`label_replace(up, "dst", "$1", "instance", "(.*):.*")`, []string{"up"}},
		{`max_over_time(rate(c_total[5m])[1h:1m])`, []string{"c_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			if got := promqlNames(tt.expr); !slices.Equal(got, tt.want) {
				t.Errorf("promqlNames = %q, want %q", got, tt.want)
			}
		})
	}
}
