package deploy

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	k8syaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite k8s/prometheusrule.yaml from alerts.yml")

const prometheusRuleFile = "k8s/prometheusrule.yaml"

// operatorLabels are the labels of the Prometheus Operator's objects:
// kube-prometheus-stack selects ServiceMonitors and PrometheusRules by
// release, the name of its Helm release, and ignores the others without a
// word. deploy/k8s/README.md says how to set another release's name.
var operatorLabels = map[string]string{"app.kubernetes.io/name": "projector", "release": "kube-prometheus-stack"}

// TestOperatorObjectsAreSelected requires the ServiceMonitor and the
// PrometheusRule to carry the labels kube-prometheus-stack selects by.
func TestOperatorObjectsAreSelected(t *testing.T) {
	ms := readManifests(t)
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		for k, v := range operatorLabels {
			if got := ms[kind].Metadata.Labels[k]; got != v {
				t.Errorf("%s label %s = %q, want %q", kind, k, got, v)
			}
		}
	}
}

// prometheusRule renders alerts.yml as the Prometheus Operator's
// PrometheusRule, so that the alerts have one source.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts struct {
		Groups yaml.Node `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &alerts); err != nil {
		t.Fatal(err)
	}
	rule := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata":   map[string]any{"name": "projector", "labels": operatorLabels},
		"spec":       map[string]any{"groups": &alerts.Groups},
	}
	var out bytes.Buffer
	out.WriteString("# Generated from deploy/alerts.yml; do not edit. After changing the alerts:\n" +
		"#   go test ./deploy/ -run TestPrometheusRuleFromAlerts -update\n")
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(rule); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestPrometheusRuleFromAlerts requires k8s/prometheusrule.yaml to be what
// alerts.yml renders to, so the two never drift apart.
func TestPrometheusRuleFromAlerts(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not alerts.yml rendered; run: go test ./deploy/ -run TestPrometheusRuleFromAlerts -update", prometheusRuleFile)
	}
}

// TestKustomizeBuild builds deploy/k8s as `kubectl apply -k` would, and
// decodes every object it yields into the Kubernetes API's own types,
// refusing fields those types do not have: a misspelt or misplaced field
// fails here rather than at apply time.
func TestKustomizeBuild(t *testing.T) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "k8s")
	if err != nil {
		t.Fatalf("kustomize build deploy/k8s: %v", err)
	}
	kinds := map[string]int{}
	for _, r := range resources.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		kind := r.GetKind()
		kinds[kind]++
		var obj any
		switch kind {
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "Service":
			obj = &corev1.Service{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "CronJob":
			obj = &batchv1.CronJob{}
		case "ServiceMonitor", "PrometheusRule":
			// The operator's types are not in the API; their shape is
			// checked by TestKubernetesStatefulSet and
			// TestPrometheusRuleFromAlerts.
			if v := r.GetApiVersion(); v != "monitoring.coreos.com/v1" {
				t.Errorf("%s %s: apiVersion %s, want monitoring.coreos.com/v1", kind, r.GetName(), v)
			}
			continue
		default:
			t.Errorf("kustomize build yields a %s, which no test checks", kind)
			continue
		}
		if err := k8syaml.UnmarshalStrict(b, obj); err != nil {
			t.Errorf("%s %s: %v\n%s", kind, r.GetName(), err, firstLines(string(b), 20))
		}
	}
	for kind, n := range map[string]int{"StatefulSet": 1, "Service": 1, "PodDisruptionBudget": 1, "CronJob": 2, "ServiceMonitor": 1, "PrometheusRule": 1, "ConfigMap": 1} {
		if kinds[kind] != n {
			t.Errorf("kustomize build yields %d of kind %s, want %d", kinds[kind], kind, n)
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
