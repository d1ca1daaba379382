package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projector/projector/internal/testenv"
)

// prometheusServer is a real Prometheus scraping projector processes.
type prometheusServer struct {
	t    *testing.T
	addr string
}

// startPrometheus runs the prometheus binary (Debian's package, which
// scripts/install-prometheus-tools.sh installs beside promtool) scraping
// targets as job projector every second.
func startPrometheus(t *testing.T, targets ...string) *prometheusServer {
	t.Helper()
	binary, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Missing(t, "prometheus", "not on PATH (apt-get install --no-install-recommends prometheus)")
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = fmt.Sprintf("%q", target)
	}
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: projector\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(binary, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", tail(log.String(), 40))
		}
	})
	return &prometheusServer{t: t, addr: addr}
}

// sample is one series of an instant query's result.
type sample struct {
	labels map[string]string
	value  float64
}

// query evaluates expr now; an error of the server fails the test, an
// unreachable server (still starting) returns ok false.
func (p *prometheusServer) query(expr string) (out []sample, ok bool) {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		p.t.Fatalf("query %s: %v", expr, err)
	}
	if body.Status != "success" {
		p.t.Fatalf("query %s: %s", expr, body.Error)
	}
	for _, r := range body.Data.Result {
		var v float64
		if s, ok := r.Value[1].(string); ok {
			fmt.Sscan(s, &v)
		}
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out, true
}

// waitQuery queries expr until cond holds of its result.
func (p *prometheusServer) waitQuery(timeout time.Duration, what, expr string, cond func([]sample) bool) []sample {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, ok := p.query(expr)
		if ok && cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s within %s: %s = %v", what, timeout, expr, got)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// dashboardPanel is a panel of the dashboard, with the row it is in.
type dashboardPanel struct {
	row, title string
	exprs      []string
}

// dashboardPanels reads the dashboard's panels, each with its row.
func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/dashboards/projector.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var out []dashboardPanel
	row := ""
	for _, p := range dash.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		dp := dashboardPanel{row: row, title: p.Title}
		for _, tg := range p.Targets {
			dp.exprs = append(dp.exprs, tg.Expr)
		}
		out = append(out, dp)
	}
	return out
}

// grafanaVariables are what Grafana puts in place of the dashboard's
// variables: every instance, and a rate window of a few scrapes.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "15s", "$__range", "5m", "$instance", ".*")

// TestDashboardShowsOwnershipAndFailover renders the dashboard's row of
// ownership, halted partitions, versions and lag per member against a real
// Prometheus scraping two real members, then kills one: the survivor takes
// its partitions, and the dashboard shows it (issue 28: a failover was
// invisible). Every other panel's query must at least evaluate.
func TestDashboardShowsOwnershipAndFailover(t *testing.T) {
	const partitions = 4
	w := newWorld(t, partitions)
	var docs []string
	for i := range 8 {
		docs = append(docs, string(doc{Key: w.key(fmt.Sprintf("d%d", i)), Version: 1, Chunks: []string{fmt.Sprintf("chunk %d", i)}}.value()))
	}
	w.publishFile(docs)
	// A short session, so that the killed member's partitions move within
	// seconds; dynamic members, so that nothing waits for a static one.
	a := w.start(nil, "--session-timeout", "6s")
	b := w.start(nil, "--session-timeout", "6s")
	prom := startPrometheus(t, a.addr, b.addr)

	owned := `sum by (instance) (projector_partitions_owned)`
	prom.waitQuery(2*time.Minute, "both members scraped, sharing every partition", owned, func(s []sample) bool {
		return len(s) == 2 && s[0].value+s[1].value == partitions && s[0].value > 0 && s[1].value > 0
	})
	w.waitDrained(a, 2*time.Minute)
	// A rate window's worth of scrapes of both, as Grafana's would have.
	prom.waitQuery(time.Minute, "a rate window of scrapes", `count_over_time(up{job="projector"}[15s])`, func(s []sample) bool {
		return len(s) == 2 && s[0].value >= 10 && s[1].value >= 10
	})

	// Each panel of the row must show something, the ownership as it is.
	want := map[string]func([]sample) bool{
		"Partitions owned per member": func(s []sample) bool { return len(s) == 3 }, // two members and the topic's count
		"Partitions no member owns":   func(s []sample) bool { return len(s) == 1 && s[0].value == 0 },
		"Assignments and revocations": func(s []sample) bool { return len(s) >= 2 },
		"Partitions by member, halted or not": func(s []sample) bool {
			return len(s) == partitions && s[0].value == 0
		},
		"Lag per member":      func(s []sample) bool { return len(s) == 2 },
		"Versions running":    func(s []sample) bool { return len(s) == 2 && s[0].labels["version"] != "" },
		"Members per version": func(s []sample) bool { return len(s) == 1 && s[0].value == 2 },
	}
	seen := map[string]bool{}
	for _, p := range dashboardPanels(t) {
		var all []sample
		for _, e := range p.exprs {
			got, ok := prom.query(grafanaVariables.Replace(e))
			if !ok {
				t.Fatalf("prometheus stopped answering")
			}
			all = append(all, got...)
		}
		if p.row != "Ownership and versions" {
			continue
		}
		seen[p.title] = true
		cond, ok := want[p.title]
		if !ok {
			t.Errorf("panel %q of the ownership row has no check in this test", p.title)
			continue
		}
		if !cond(all) {
			t.Errorf("panel %q shows %v with two members sharing %d partitions", p.title, all, partitions)
		}
	}
	for title := range want {
		if !seen[title] {
			t.Errorf("the dashboard has no panel %q in its row \"Ownership and versions\"", title)
		}
	}

	// The failover: one member dies without leaving the group.
	b.kill()
	survivor := a.addr
	prom.waitQuery(2*time.Minute, "the survivor owning every partition", owned, func(s []sample) bool {
		return len(s) == 1 && s[0].labels["instance"] == survivor && s[0].value == partitions
	})
	assigned := prom.waitQuery(time.Minute, "the failover among the survivor's assignments",
		`sum(projector_partition_assignments_total{instance="`+survivor+`"})`, func(s []sample) bool { return len(s) == 1 && s[0].value > 0 })
	if assigned[0].value < partitions {
		t.Errorf("survivor: %v partitions assigned in all, want at least %d (its own and the dead member's)", assigned[0].value, partitions)
	}
	prom.waitQuery(time.Minute, "no partition left unowned",
		grafanaVariables.Replace(`max by (topic) (projector_topic_partitions) - sum by (topic) (projector_partitions_owned)`),
		func(s []sample) bool { return len(s) == 1 && s[0].value == 0 })
	a.stop()
}
