package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
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

	"gopkg.in/yaml.v3"

	"github.com/projector/projector/internal/testenv"
)

// incident is one test of alerts_incident_test.yml: the alerts that
// promtool shows alerts.yml firing at one moment of it.
type incident struct {
	name   string
	alerts []map[string]string
}

// alertLabel reads one label of an ALERTS{...} series as promtool writes it.
var alertLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)

func readIncidents(t *testing.T) []incident {
	t.Helper()
	var f struct {
		Tests []struct {
			Name           string `yaml:"name"`
			PromqlExprTest []struct {
				Expr       string `yaml:"expr"`
				ExpSamples []struct {
					Labels string `yaml:"labels"`
				} `yaml:"exp_samples"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "alerts_incident_test.yml", &f)
	var out []incident
	for _, tc := range f.Tests {
		in := incident{name: tc.Name}
		for _, e := range tc.PromqlExprTest {
			if e.Expr != `ALERTS{alertstate="firing"}` {
				t.Fatalf("%s: expression %q, want the firing ALERTS", tc.Name, e.Expr)
			}
			for _, s := range e.ExpSamples {
				labels := map[string]string{}
				for _, m := range alertLabel.FindAllStringSubmatch(s.Labels, -1) {
					if m[1] != "alertstate" {
						labels[m[1]] = m[2]
					}
				}
				in.alerts = append(in.alerts, labels)
			}
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		t.Fatal("alerts_incident_test.yml has no incident")
	}
	return out
}

// notification is one webhook call of Alertmanager: one page or message.
type notification struct {
	Receiver    string            `json:"receiver"`
	GroupLabels map[string]string `json:"groupLabels"`
	Alerts      []struct {
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

// alertmanager is a real Alertmanager running alertmanager.yml, its
// receivers sent to a webhook that keeps what it is sent.
type alertmanager struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	sent []notification
}

// startAlertmanager runs Debian's prometheus-alertmanager (the package
// that also holds amtool) on alertmanager.yml, with its receivers pointed
// at a webhook and its waits shortened; the route's grouping and the
// inhibition rules are the file's own.
func startAlertmanager(t *testing.T) *alertmanager {
	t.Helper()
	binary, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		if binary, err = exec.LookPath("alertmanager"); err != nil {
			testenv.Missing(t, "alertmanager", "not on PATH (apt-get install --no-install-recommends prometheus-alertmanager)")
		}
	}
	am := &alertmanager{t: t}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			t.Errorf("webhook: %v", err)
		}
		am.mu.Lock()
		am.sent = append(am.sent, n)
		am.mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	var cfg map[string]any
	readYAML(t, "alertmanager.yml", &cfg)
	route := cfg["route"].(map[string]any)
	route["group_wait"], route["group_interval"] = "1s", "1s"
	for _, r := range cfg["receivers"].([]any) {
		rc := r.(map[string]any)
		rc["webhook_configs"] = []any{map[string]any{"url": hook.URL + "/" + rc["name"].(string), "send_resolved": false}}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	am.addr = l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(binary, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+am.addr, "--cluster.listen-address=", "--log.level=warn")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("alertmanager output:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + am.addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alertmanager not ready within 30 s:\n%s", log.String())
		}
	}
	return am
}

// fire sends alerts to Alertmanager as Prometheus does, each with the
// cluster external label.
func (am *alertmanager) fire(cluster string, alerts []map[string]string) {
	am.t.Helper()
	var body []map[string]any
	now := time.Now()
	for _, a := range alerts {
		labels := map[string]string{"cluster": cluster}
		for k, v := range a {
			labels[k] = v
		}
		body = append(body, map[string]any{"labels": labels, "startsAt": now.Format(time.RFC3339), "endsAt": now.Add(time.Hour).Format(time.RFC3339)})
	}
	b, err := json.Marshal(body)
	if err != nil {
		am.t.Fatal(err)
	}
	resp, err := http.Post("http://"+am.addr+"/api/v2/alerts", "application/json", bytes.NewReader(b))
	if err != nil {
		am.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		am.t.Fatalf("post alerts: %s", resp.Status)
	}
}

// settle waits out the group wait and a few group intervals, then returns
// what was sent, each as "receiver: cluster alertname alertname...".
func (am *alertmanager) settle() []string {
	time.Sleep(6 * time.Second)
	am.mu.Lock()
	defer am.mu.Unlock()
	var out []string
	for _, n := range am.sent {
		var names []string
		for _, a := range n.Alerts {
			if !slices.Contains(names, a.Labels["alertname"]) {
				names = append(names, a.Labels["alertname"])
			}
		}
		slices.Sort(names)
		out = append(out, fmt.Sprintf("%s: %s %s", n.Receiver, n.GroupLabels["cluster"], strings.Join(names, " ")))
	}
	slices.Sort(out)
	return out
}

// The page each incident of alerts_incident_test.yml must give, once per
// cluster, and nothing else: no second page for the same cause, no page
// per member, and no message to the working-hours channel for what the
// page covers.
var wantPage = map[string]string{
	"a store outage across two members pages once, for ProjectorNotReady": "ProjectorNotReady",
	"every member down pages once, for ProjectorMissing":                  "ProjectorMissing",
	"one member down pages once, for ProjectorDown":                       "ProjectorDown",
	"a halted partition pages once, for ProjectorPartitionHalted":         "ProjectorPartitionHalted",
	"a store limit pages once, for ProjectorNotReady":                     "ProjectorNotReady",
}

// TestAlertmanagerPagesOncePerIncident sends each incident's alerts, as
// promtool shows alerts.yml firing them, from two clusters at once to a
// real Alertmanager running alertmanager.yml: each cluster gets one page,
// for the alert that names the cause (issue 28: one store outage paged once
// per member, and inhibitions were only checked by name).
func TestAlertmanagerPagesOncePerIncident(t *testing.T) {
	incidents := readIncidents(t)
	for _, in := range incidents {
		t.Run(in.name, func(t *testing.T) {
			t.Parallel()
			page, ok := wantPage[in.name]
			if !ok {
				t.Fatalf("no expected page for incident %q", in.name)
			}
			am := startAlertmanager(t)
			am.fire("east", in.alerts)
			am.fire("west", in.alerts)
			got := am.settle()
			want := []string{"pager: east " + page, "pager: west " + page}
			if !slices.Equal(got, want) {
				t.Errorf("notifications:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
	// Each inhibition holds within its cluster only: every member of one
	// cluster down hides nothing of a store outage in another.
	t.Run("an incident of one cluster hides nothing of another", func(t *testing.T) {
		t.Parallel()
		byName := map[string]incident{}
		for _, in := range incidents {
			byName[in.name] = in
		}
		am := startAlertmanager(t)
		am.fire("east", byName["every member down pages once, for ProjectorMissing"].alerts)
		am.fire("west", byName["a store outage across two members pages once, for ProjectorNotReady"].alerts)
		got := am.settle()
		want := []string{"pager: east ProjectorMissing", "pager: west ProjectorNotReady"}
		if !slices.Equal(got, want) {
			t.Errorf("notifications:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})
}
