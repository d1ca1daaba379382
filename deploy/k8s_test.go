package deploy

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// manifest is the part of a Kubernetes object the tests read; each kind
// fills its own fields.
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`       // ConfigMap
	StringData map[string]string `yaml:"stringData"` // Secret
	Spec       struct {
		Selector selector `yaml:"selector"` // StatefulSet, PodDisruptionBudget, Service
		Ports    []struct {
			Name       string `yaml:"name"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"` // Service
		ServiceName                string      `yaml:"serviceName"`                // StatefulSet
		UnhealthyPodEvictionPolicy string      `yaml:"unhealthyPodEvictionPolicy"` // PodDisruptionBudget
		Template                   podTemplate `yaml:"template"`                   // StatefulSet
		Endpoints                  []struct {
			Port string `yaml:"port"`
		} `yaml:"endpoints"` // ServiceMonitor
		Schedule          string `yaml:"schedule"`          // CronJob
		ConcurrencyPolicy string `yaml:"concurrencyPolicy"` // CronJob
		BackoffLimit      *int   `yaml:"backoffLimit"`      // Job
		TimeZone          string `yaml:"timeZone"`          // CronJob
		JobTemplate       struct {
			Spec struct {
				BackoffLimit     int `yaml:"backoffLimit"`
				PodFailurePolicy struct {
					Rules []struct {
						Action      string `yaml:"action"`
						OnExitCodes struct {
							Operator string `yaml:"operator"`
							Values   []int  `yaml:"values"`
						} `yaml:"onExitCodes"`
					} `yaml:"rules"`
				} `yaml:"podFailurePolicy"`
				Template podTemplate `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"` // CronJob
	} `yaml:"spec"`
	Resources []string `yaml:"resources"` // Kustomization
	Images    []struct {
		Name    string `yaml:"name"`
		NewTag  string `yaml:"newTag"`
		NewName string `yaml:"newName"`
	} `yaml:"images"` // Kustomization
}

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec podSpec `yaml:"spec"`
}

// selector is a label selector: a Deployment's and a PDB's hold
// matchLabels, a Service's is the labels themselves.
type selector map[string]any

func (s selector) labels() map[string]string {
	m := map[string]any(s)
	if ml, ok := m["matchLabels"].(map[string]any); ok {
		m = ml
	}
	out := map[string]string{}
	for k, v := range m {
		out[k], _ = v.(string)
	}
	return out
}

type podSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
		RunAsUser    int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	RestartPolicy  string      `yaml:"restartPolicy"`
	// TopologySpreadConstraints spread the members over nodes and zones.
	TopologySpreadConstraints []struct {
		TopologyKey string `yaml:"topologyKey"`
		MaxSkew     int    `yaml:"maxSkew"`
	} `yaml:"topologySpreadConstraints"`
}

type container struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// readManifests returns the manifests of deploy/k8s by kind, or by
// kind/name for the CronJobs, of which there are two; each file holds one.
func readManifests(t *testing.T) map[string]manifest {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]manifest{}
	for _, f := range files {
		var m manifest
		readYAML(t, f, &m)
		key := m.Kind
		if m.Kind == "CronJob" {
			key += "/" + m.Metadata.Name
		}
		if _, dup := out[key]; dup {
			t.Fatalf("two manifests %s", key)
		}
		out[key] = m
	}
	return out
}

func TestKubernetesEnvironment(t *testing.T) {
	ms := readManifests(t)
	flags := envNames(t, "run")
	config, secret := ms["ConfigMap"], ms["Secret"]
	for _, src := range []struct {
		kind string
		vars map[string]string
	}{{"ConfigMap", config.Data}, {"Secret", secret.StringData}} {
		if len(src.vars) == 0 {
			t.Errorf("no %s with variables", src.kind)
		}
		for k := range src.vars {
			if _, ok := flags[k]; !ok {
				t.Errorf("%s sets %s, which is no flag of `projector run`", src.kind, k)
			}
		}
	}
	// What holds a password belongs in the Secret, as a placeholder.
	for _, k := range []string{"PROJECTOR_NEO4J_PASSWORD", "PROJECTOR_POSTGRES_DSN"} {
		if _, ok := config.Data[k]; ok {
			t.Errorf("the ConfigMap sets %s, which holds a password; want it in the Secret only", k)
		}
		if v := secret.StringData[k]; !strings.Contains(v, "REPLACE-ME") {
			t.Errorf("the example Secret sets %s = %q, want a REPLACE-ME placeholder", k, v)
		}
	}

	for _, name := range []string{"StatefulSet", "CronJob/projector-reconcile", "CronJob/projector-ledger-prune"} {
		pod := ms[name].Spec.Template.Spec
		if strings.HasPrefix(name, "CronJob") {
			pod = ms[name].Spec.JobTemplate.Spec.Template.Spec
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%s has %d containers, want 1", name, len(pod.Containers))
		}
		c := pod.Containers[0]
		var refs []string
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				refs = append(refs, "ConfigMap/"+ef.ConfigMapRef.Name)
			}
			if ef.SecretRef != nil {
				refs = append(refs, "Secret/"+ef.SecretRef.Name)
			}
		}
		if want := []string{"ConfigMap/" + config.Metadata.Name, "Secret/" + secret.Metadata.Name}; !slices.Equal(refs, want) {
			t.Errorf("%s takes its environment from %q, want %q", name, refs, want)
		}
		for _, e := range c.Env {
			if _, ok := flags[e.Name]; strings.HasPrefix(e.Name, "PROJECTOR_") && !ok {
				t.Errorf("%s sets %s, which is no flag of `projector run`", name, e.Name)
			}
		}
	}
}

func TestKubernetesStatefulSet(t *testing.T) {
	ms := readManifests(t)
	d := ms["StatefulSet"]
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]

	shutdown, err := time.ParseDuration(flagsOf(t, "run")["shutdown-timeout"])
	if err != nil {
		t.Fatalf("default of --shutdown-timeout: %v", err)
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace <= shutdown {
		t.Errorf("terminationGracePeriodSeconds = %s, want more than --shutdown-timeout %s", grace, shutdown)
	}

	limit := bytesOf(t, c.Resources.Limits["memory"])
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if memLimit := bytesOf(t, env["GOMEMLIMIT"]); memLimit >= limit || memLimit < limit*8/10 {
		t.Errorf("GOMEMLIMIT = %q for a memory limit of %q, want a little below it (80%% to 100%%)", env["GOMEMLIMIT"], c.Resources.Limits["memory"])
	}
	if c.Resources.Requests["memory"] == "" || c.Resources.Requests["cpu"] == "" {
		t.Errorf("requests = %v, want cpu and memory", c.Resources.Requests)
	}

	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == 0 {
		t.Errorf("pod securityContext = %+v, want runAsNonRoot and a non-zero runAsUser", pod.SecurityContext)
	}
	if sc := c.SecurityContext; !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext = %+v, want a read-only root file system and no privilege escalation", sc)
	}

	// The probes reach the port the projector listens on.
	_, addrPort, _ := net.SplitHostPort(ms["ConfigMap"].Data["PROJECTOR_HTTP_ADDR"])
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	tests := []struct {
		name  string
		probe *probe
		path  string
	}{
		{"startupProbe", c.StartupProbe, "/healthz"},
		{"livenessProbe", c.LivenessProbe, "/livez"},
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
	}
	for _, tt := range tests {
		if tt.probe == nil {
			t.Errorf("no %s", tt.name)
			continue
		}
		if got := tt.probe.HTTPGet; got.Path != tt.path || ports[got.Port] != addrPort {
			t.Errorf("%s gets %s on port %q (%s), want %s on port %s of PROJECTOR_HTTP_ADDR", tt.name, got.Path, got.Port, ports[got.Port], tt.path, addrPort)
		}
	}

	// Static membership: each pod's stable name is its group instance id.
	var instanceID string
	for _, e := range c.Env {
		if e.Name == "PROJECTOR_GROUP_INSTANCE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			instanceID = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if instanceID != "metadata.name" {
		t.Errorf("PROJECTOR_GROUP_INSTANCE_ID from %q, want the pod name (metadata.name)", instanceID)
	}
	if d.Spec.ServiceName != ms["Service"].Metadata.Name {
		t.Errorf("serviceName %q, want the Service %q", d.Spec.ServiceName, ms["Service"].Metadata.Name)
	}
	// One store outage makes every pod unready; such pods must stay
	// evictable, or the budget blocks every node drain.
	if got := ms["PodDisruptionBudget"].Spec.UnhealthyPodEvictionPolicy; got != "AlwaysAllow" {
		t.Errorf("unhealthyPodEvictionPolicy = %q, want AlwaysAllow", got)
	}

	// Service, PodDisruptionBudget and ServiceMonitor select the pods.
	podLabels := d.Spec.Template.Metadata.Labels
	for _, kind := range []string{"StatefulSet", "Service", "PodDisruptionBudget", "ServiceMonitor"} {
		sel := ms[kind].Spec.Selector.labels()
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", kind)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("%s selects %v, which the pods (labels %v) do not match", kind, sel, podLabels)
			}
		}
	}
	servicePorts := map[string]bool{}
	for _, p := range ms["Service"].Spec.Ports {
		servicePorts[p.Name] = true
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("the Service targets port %q, which the container does not name", p.TargetPort)
		}
	}
	for _, ep := range ms["ServiceMonitor"].Spec.Endpoints {
		if !servicePorts[ep.Port] {
			t.Errorf("the ServiceMonitor scrapes port %q, which the Service does not name", ep.Port)
		}
	}
}

// TestKubernetesCronJobs requires the nightly and weekly jobs to run the
// commands docs/operations.md recommends, one at a time, and to push
// their results where the alerts read them.
func TestKubernetesCronJobs(t *testing.T) {
	ms := readManifests(t)
	for _, tt := range []struct {
		name, command string
		// final are the exit statuses no retry can change: a usage
		// error, and a push that failed after the work was done, which a
		// rerun would repeat (issue 28).
		final []int
	}{{"projector-reconcile", "reconcile", []int{2, 6}}, {"projector-ledger-prune", "ledger-prune", []int{2, 6}}} {
		cj, ok := ms["CronJob/"+tt.name]
		if !ok {
			t.Errorf("no CronJob %s", tt.name)
			continue
		}
		pod := cj.Spec.JobTemplate.Spec.Template
		c := pod.Spec.Containers[0]
		if len(c.Args) == 0 || c.Args[0] != tt.command || !slices.Contains(c.Args, "--push-url") {
			t.Errorf("CronJob %s runs %q, want projector %s with --push-url", tt.name, c.Args, tt.command)
		}
		// Findings are the alert's: a reconcile that found some must not
		// fail its Job, or KubeJobFailed pages beside it (issue 28).
		if tt.command == "reconcile" && !slices.Contains(c.Args, "--fail-on-discrepancies=false") {
			t.Errorf("CronJob %s runs %q: its findings fail the Job; want --fail-on-discrepancies=false", tt.name, c.Args)
		}
		flags := flagsOf(t, tt.command)
		for _, a := range c.Args[1:] {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				if _, known := flags[name]; !known {
					t.Errorf("CronJob %s passes %s, which is no flag of projector %s", tt.name, a, tt.command)
				}
			}
		}
		if cj.Spec.ConcurrencyPolicy != "Forbid" || pod.Spec.RestartPolicy != "Never" || cj.Spec.Schedule == "" || cj.Spec.TimeZone == "" {
			t.Errorf("CronJob %s: schedule %q in time zone %q, concurrencyPolicy %q, restartPolicy %q; want a schedule in a named time zone, Forbid and Never",
				tt.name, cj.Spec.Schedule, cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy, pod.Spec.RestartPolicy)
		}
		// A transient failure (a store restarting at night) is retried;
		// what no retry changes fails the Job at once.
		job := cj.Spec.JobTemplate.Spec
		var failsOn []int
		for _, r := range job.PodFailurePolicy.Rules {
			if r.Action == "FailJob" && r.OnExitCodes.Operator == "In" {
				failsOn = append(failsOn, r.OnExitCodes.Values...)
			}
		}
		slices.Sort(failsOn)
		if job.BackoffLimit < 1 || !slices.Equal(failsOn, tt.final) {
			t.Errorf("CronJob %s: backoffLimit %d, fails the Job at once on exit statuses %v; want retries, and no retry on %v",
				tt.name, job.BackoffLimit, failsOn, tt.final)
		}
		// Its pods must not count as projector members.
		if pod.Metadata.Labels["app.kubernetes.io/name"] == ms["StatefulSet"].Spec.Template.Metadata.Labels["app.kubernetes.io/name"] {
			t.Errorf("CronJob %s's pods carry the projector pods' labels, so the Service and the budget would select them", tt.name)
		}
	}
}

// TestKustomization requires kustomization.yaml to apply every manifest
// but the example Secret and the replay Job, which an operator applies by
// hand: `kubectl apply -k` must never reset the group.
func TestKustomization(t *testing.T) {
	var k manifest
	readYAML(t, "k8s/kustomization.yaml", &k)
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && b != "secret.example.yaml" && b != "job-replay.yaml" {
			want[b] = true
		}
	}
	got := map[string]bool{}
	for _, r := range k.Resources {
		got[r] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("kustomization resources = %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if _, err := os.Stat("k8s/README.md"); err != nil {
		t.Error(err)
	}
}

// bytesOf reads a memory quantity in the forms Kubernetes (256Mi) and
// GOMEMLIMIT (230MiB) use.
func bytesOf(t *testing.T, q string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		shift  uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"Ki", 10}, {"Mi", 20}, {"Gi", 30}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v << u.shift
		}
	}
	t.Fatalf("quantity %q: want a number with Ki, Mi, Gi (or KiB, MiB, GiB)", q)
	return 0
}

// TestKubernetesReplayJob requires the replay recipe's Job (README.md,
// "Replay") to print the plan first, then reset the same way with
// --execute, waiting longer than a stopped pod's static membership lasts,
// once: a replay that failed is not run again by itself.
func TestKubernetesReplayJob(t *testing.T) {
	b, err := os.ReadFile("k8s/job-replay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := k8syaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatalf("job-replay.yaml: %v", err)
	}
	pod := job.Spec.Template.Spec
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("backoffLimit %v, restartPolicy %s; want 0 and Never", job.Spec.BackoffLimit, pod.RestartPolicy)
	}
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want the plan and the reset", len(pod.InitContainers), len(pod.Containers))
	}
	plan, reset := pod.InitContainers[0].Args, pod.Containers[0].Args
	if len(plan) == 0 || plan[0] != "replay" || slices.Contains(plan, "--execute") {
		t.Errorf("the plan runs %q, want replay without --execute", plan)
	}
	i := slices.Index(reset, "--wait")
	if len(reset) == 0 || reset[0] != "replay" || !slices.Contains(reset, "--execute") || i < 0 || i+1 >= len(reset) {
		t.Fatalf("the reset runs %q, want replay --execute --wait <duration>", reset)
	}
	if wait, err := time.ParseDuration(reset[i+1]); err != nil || wait <= 45*time.Second {
		t.Errorf("the reset waits %s (%v), want longer than the pods' 45 s session timeout", reset[i+1], err)
	}
	flags := flagsOf(t, "replay")
	for _, args := range [][]string{plan, reset} {
		for _, a := range args[1:] {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				if _, known := flags[name]; !known {
					t.Errorf("the Job passes %s, which is no flag of projector replay", a)
				}
			}
		}
	}
	to := func(args []string) string { return args[slices.Index(args, "--to")+1] }
	if slices.Index(plan, "--to") < 0 || slices.Index(reset, "--to") < 0 || to(plan) != to(reset) {
		t.Errorf("the plan runs %q and the reset %q, want the same --to", plan, reset)
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[1].SecretRef == nil {
			t.Errorf("container %s does not load the projector's ConfigMap and Secret", c.Name)
		}
	}
}

// Issue 28: nothing kept the members apart, so one node's failure could
// take them all. The StatefulSet spreads them over nodes and zones.
func TestKubernetesSpreadsMembers(t *testing.T) {
	var keys []string
	for _, c := range readManifests(t)["StatefulSet"].Spec.Template.Spec.TopologySpreadConstraints {
		if c.MaxSkew == 1 {
			keys = append(keys, c.TopologyKey)
		}
	}
	for _, want := range []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"} {
		if !slices.Contains(keys, want) {
			t.Errorf("the StatefulSet spreads its pods over %v, want %s with maxSkew 1", keys, want)
		}
	}
}
