package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/projector/projector/internal/testenv"
)

// promtool returns the path of promtool, from Debian's prometheus package
// (.ci/run installs it), or skips (fails in CI) when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool", "not on PATH (apt-get install --no-install-recommends prometheus)")
	}
	return path
}

func TestPromtool(t *testing.T) {
	tool := promtool(t)
	tests := []struct {
		name string
		args []string
	}{
		{"alert rules", []string{"check", "rules", "alerts.yml"}},
		{"prometheus config", []string{"check", "config", "prometheus.yml"}},
		{"alert rule tests", []string{"test", "rules", "alerts_test.yml"}},
		{"daily alert rule tests", []string{"test", "rules", "alerts_daily_test.yml"}},
		{"incident tests", []string{"test", "rules", "alerts_incident_test.yml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(tool, tt.args...).CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(tt.args, " "), err, out)
			}
		})
	}
}

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readAlerts(t *testing.T) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "alerts.yml", &f)
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return out
}

// TestAlertsDocumented requires every alert to say how bad it is, what
// happened and where the operator reads what to do.
func TestAlertsDocumented(t *testing.T) {
	for _, r := range readAlerts(t) {
		t.Run(r.Alert, func(t *testing.T) {
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("severity = %q, want critical or warning", s)
			}
			if r.Annotations["summary"] == "" {
				t.Error("no summary")
			}
			if d := r.Annotations["description"]; !strings.Contains(d, `docs/operations.md, section "`) {
				t.Errorf("description = %q, want it to name a section of docs/operations.md", d)
			}
		})
	}
}

// TestAlertsHaveRunbooks requires every alert's runbook_url to link to the
// section of docs/operations.md that its description names, and that
// section to exist, so a link from a page never lands on nothing.
func TestAlertsHaveRunbooks(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			anchors[slug(title)] = true
		}
	}
	section := regexp.MustCompile(`docs/operations\.md, section "([^"]+)"`)
	for _, r := range readAlerts(t) {
		m := section.FindStringSubmatch(r.Annotations["description"])
		if m == nil {
			continue // TestAlertsDocumented reports it
		}
		want := runbookBase + "/docs/operations.md#" + slug(m[1])
		if got := r.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q, the section its description names", r.Alert, got, want)
		}
		if !anchors[slug(m[1])] {
			t.Errorf("%s: docs/operations.md has no section %q", r.Alert, m[1])
		}
	}
}

// runbookBase is how every runbook_url starts: the Prometheus external
// label runbook_base when set, else the project's repository.
const runbookBase = "{{ with $externalLabels.runbook_base }}{{ . }}{{ else }}https://github.com/projector/projector/blob/main{{ end }}"

// slug is the anchor GitHub gives a Markdown heading.
func slug(title string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(strings.TrimSpace(title)) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteRune(c)
		case c == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestAlertsTested requires alerts_test.yml to see every alert of
// alerts.yml both firing and not firing.
func TestAlertsTested(t *testing.T) {
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string    `yaml:"alertname"`
				ExpAlerts yaml.Node `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, file := range []string{"alerts_test.yml", "alerts_daily_test.yml"} {
		f.Tests = nil
		readYAML(t, file, &f)
		for _, tc := range f.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts.Content) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	for _, r := range readAlerts(t) {
		if !fires[r.Alert] || !quiet[r.Alert] {
			t.Errorf("alerts_test.yml and alerts_daily_test.yml: %s tested firing %v, not firing %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/dashboards/projector.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("projector.json: %v", err)
	}
	return d
}

// TestDashboard checks that every panel queries the data source that the
// dashboard's datasource variable picks (so the dashboard imports into any
// Grafana, whatever its data sources' uids; the provisioned one is the
// default), and that every query is valid PromQL: promtool checks them as
// recording rules once Grafana's variables are replaced by values.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	var ds struct {
		Datasources []struct {
			UID string `yaml:"uid"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 {
		t.Fatalf("%d provisioned data sources, want 1", len(ds.Datasources))
	}
	if ds.Datasources[0].UID == "" {
		t.Error("the provisioned data source has no uid")
	}
	const uid = "${datasource}"
	var picker *variable
	for i, v := range d.Templating.List {
		if v.Name == "datasource" {
			picker = &d.Templating.List[i]
		} else if v.Datasource == nil || v.Datasource.UID != uid {
			t.Errorf("variable %q: data source %+v, want uid %q", v.Name, v.Datasource, uid)
		}
	}
	if picker == nil || picker.Type != "datasource" || picker.Query != "prometheus" {
		t.Errorf("datasource variable = %+v, want a variable of type datasource over prometheus", picker)
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid, so its address changes with every provisioning")
	}

	grafanaVars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	ids := map[int]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != uid {
			t.Errorf("panel %q: data source %+v, want uid %q", p.Title, p.Datasource, uid)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", len(rules)), Expr: grafanaVars.Replace(tg.Expr)})
		}
	}

	tool := promtool(t)
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries are not valid PromQL: %v\n%s", err, out)
	}
}

// TestDashboardCoversAlerts requires the dashboard to show every projector
// metric an alert fires on, so an operator paged by one finds it there.
func TestDashboardCoversAlerts(t *testing.T) {
	var exprs []string
	for _, p := range readDashboard(t).Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, r := range readAlerts(t) {
		for _, f := range strings.FieldsFunc(r.Expr, func(c rune) bool { return !(c == '_' || c >= 'a' && c <= 'z') }) {
			if strings.HasPrefix(f, "projector_") && !strings.Contains(all, f) {
				t.Errorf("alert %s uses %s, which no dashboard panel shows", r.Alert, f)
			}
		}
	}
}

// TestAlertmanagerExample checks alertmanager.yml with amtool, and requires
// each alert its inhibition rules name to be one of alerts.yml, so that a
// renamed alert cannot silently stop inhibiting.
func TestAlertmanagerExample(t *testing.T) {
	tool, err := exec.LookPath("amtool")
	if err != nil {
		testenv.Missing(t, "amtool", "not on PATH (apt-get install --no-install-recommends prometheus-alertmanager)")
	}
	if out, err := exec.Command(tool, "check-config", "alertmanager.yml").CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config alertmanager.yml: %v\n%s", err, out)
	}
	alerts := map[string]bool{}
	for _, r := range readAlerts(t) {
		alerts[r.Alert] = true
	}
	var cfg struct {
		InhibitRules []struct {
			SourceMatchers []string `yaml:"source_matchers"`
			TargetMatchers []string `yaml:"target_matchers"`
		} `yaml:"inhibit_rules"`
	}
	readYAML(t, "alertmanager.yml", &cfg)
	name := regexp.MustCompile(`^alertname=~?"([^"]+)"$`)
	for _, r := range cfg.InhibitRules {
		for _, m := range append(r.SourceMatchers, r.TargetMatchers...) {
			sm := name.FindStringSubmatch(m)
			if sm == nil {
				t.Errorf("matcher %q names no alert", m)
				continue
			}
			for _, a := range strings.Split(sm[1], "|") {
				if !alerts[a] {
					t.Errorf("inhibition rule matcher %q names %s, which is no alert of alerts.yml", m, a)
				}
			}
		}
	}
}
