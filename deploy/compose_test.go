package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// composeFile is the part of docker-compose.yml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Restart     string            `yaml:"restart"`
	Profiles    []string          `yaml:"profiles"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	readYAML(t, "../docker-compose.yml", &c)
	return c
}

// service returns a service of the compose file or fails.
func (c composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := c.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

// contractEnv is the environment of the projector in docker-compose.yml: the
// flags of `projector run` that the public contract names, and nothing else.
var contractEnv = []string{
	"PROJECTOR_BROKERS", "PROJECTOR_TOPIC", "PROJECTOR_GROUP", "PROJECTOR_DLQ_TOPIC",
	"PROJECTOR_QDRANT_ADDR", "PROJECTOR_QDRANT_COLLECTION",
	"PROJECTOR_NEO4J_URI", "PROJECTOR_NEO4J_USER", "PROJECTOR_NEO4J_PASSWORD",
	"PROJECTOR_POSTGRES_DSN", "PROJECTOR_HTTP_ADDR",
}

func TestComposeServices(t *testing.T) {
	c := readCompose(t)
	tests := []struct {
		service string
		image   *regexp.Regexp // nil: built from deploy/Dockerfile
		ports   []string
	}{
		{"kafka", regexp.MustCompile(`^apache/kafka:4\.`), []string{"127.0.0.1:9092:9092"}},
		{"qdrant", regexp.MustCompile(`^qdrant/qdrant:v1\.`), []string{"127.0.0.1:6333:6333", "127.0.0.1:6334:6334"}},
		{"neo4j", regexp.MustCompile(`^neo4j:5\.26-community$`), []string{"127.0.0.1:7474:7474", "127.0.0.1:7687:7687"}},
		{"postgres", regexp.MustCompile(`^postgres:1[56]\b`), []string{"127.0.0.1:5432:5432"}},
		{"prometheus", regexp.MustCompile(`^prom/prometheus:v3\.`), []string{"127.0.0.1:9090:9090"}},
		{"grafana", regexp.MustCompile(`^grafana/grafana:\d`), []string{"127.0.0.1:3000:3000"}},
		{"projector", nil, []string{"127.0.0.1:8080:8080"}},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			s := c.service(t, tt.service)
			if tt.image != nil && !tt.image.MatchString(s.Image) {
				t.Errorf("image = %q, want one matching %s", s.Image, tt.image)
			}
			if tt.image == nil && (s.Build == nil || s.Build.Context != "." || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Target != "") {
				t.Errorf("build = %+v, want context . and dockerfile deploy/Dockerfile, default target", s.Build)
			}
			if !slices.Equal(s.Ports, tt.ports) {
				t.Errorf("ports = %q, want %q", s.Ports, tt.ports)
			}
			if s.Restart == "" {
				t.Error("no restart policy")
			}
			if len(s.Profiles) > 0 {
				t.Errorf("profiles = %q, want none: the service belongs to every `docker compose up`", s.Profiles)
			}
		})
	}
}

// TestComposeMounts checks what every service publishes and mounts: ports on
// loopback only, named volumes declared, bind mounts of files that exist.
func TestComposeMounts(t *testing.T) {
	c := readCompose(t)
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q, want it on 127.0.0.1 only", name, p)
			}
		}
		for _, v := range s.Volumes {
			source, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(source, ".") {
				if _, err := os.Stat(filepath.Join("..", source)); err != nil {
					t.Errorf("%s mounts %s: %v", name, source, err)
				}
				continue
			}
			if _, ok := c.Volumes[source]; !ok {
				t.Errorf("%s mounts volume %q, which the top-level volumes do not declare", name, source)
			}
		}
	}
}

func TestComposeProjector(t *testing.T) {
	c := readCompose(t)
	p := c.service(t, "projector")

	var names []string
	for k := range p.Environment {
		names = append(names, k)
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(contractEnv))
	if !slices.Equal(names, want) {
		t.Errorf("projector environment = %q, want exactly %q", names, want)
	}
	flags := envNames(t, "run")
	for _, k := range names {
		if _, ok := flags[k]; !ok {
			t.Errorf("projector environment sets %s, which is no flag of `projector run`", k)
		}
	}

	// Each store: started healthy before the projector, reached at its
	// compose service name.
	for _, store := range []string{"kafka", "qdrant", "neo4j", "postgres"} {
		if got := p.DependsOn[store].Condition; got != "service_healthy" {
			t.Errorf("projector depends on %s with condition %q, want service_healthy", store, got)
		}
		if s := c.service(t, store); s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("%s has no healthcheck for the projector to wait on", store)
		}
	}
	env := p.Environment
	kafka := c.service(t, "kafka").Environment
	advertised := listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
	for _, b := range strings.Split(env["PROJECTOR_BROKERS"], ",") {
		if host, _, _ := net.SplitHostPort(b); host != "kafka" || !slices.Contains(advertised, b) {
			t.Errorf("PROJECTOR_BROKERS has %q, want a listener kafka advertises as kafka:<port> (advertised: %q)", b, advertised)
		}
	}
	if !slices.Contains(advertised, "localhost:9092") || !slices.Contains(listeners(kafka["KAFKA_LISTENERS"]), ":9092") {
		t.Errorf("kafka listens on %q, advertises %q; want a listener on :9092 advertised as localhost:9092 for the host",
			kafka["KAFKA_LISTENERS"], advertised)
	}
	if got := env["PROJECTOR_QDRANT_ADDR"]; got != "qdrant:6334" {
		t.Errorf("PROJECTOR_QDRANT_ADDR = %q, want qdrant:6334 (gRPC)", got)
	}
	if got := env["PROJECTOR_NEO4J_URI"]; got != "bolt://neo4j:7687" {
		t.Errorf("PROJECTOR_NEO4J_URI = %q, want bolt://neo4j:7687", got)
	}
	neo4jAuth := env["PROJECTOR_NEO4J_USER"] + "/" + env["PROJECTOR_NEO4J_PASSWORD"]
	if got := c.service(t, "neo4j").Environment["NEO4J_AUTH"]; got != neo4jAuth || env["PROJECTOR_NEO4J_PASSWORD"] == "" {
		t.Errorf("neo4j NEO4J_AUTH = %q, want the projector's user/password %q, with a password", got, neo4jAuth)
	}
	dsn, err := url.Parse(env["PROJECTOR_POSTGRES_DSN"])
	if err != nil {
		t.Fatalf("PROJECTOR_POSTGRES_DSN: %v", err)
	}
	pg := c.service(t, "postgres").Environment
	password, _ := dsn.User.Password()
	if dsn.Host != "postgres:5432" || dsn.User.Username() != pg["POSTGRES_USER"] || password != pg["POSTGRES_PASSWORD"] ||
		dsn.Path != "/"+pg["POSTGRES_DB"] {
		t.Errorf("PROJECTOR_POSTGRES_DSN = %q, want postgres:5432 with the postgres service's user, password and database", dsn.Redacted())
	}
	if got := env["PROJECTOR_HTTP_ADDR"]; got != "0.0.0.0:8080" {
		t.Errorf("PROJECTOR_HTTP_ADDR = %q, want 0.0.0.0:8080, reachable from Prometheus and the host", got)
	}
}

// listeners returns the host:port of each NAME://host:port of a Kafka
// listener list.
func listeners(list string) []string {
	var out []string
	for _, l := range strings.Split(list, ",") {
		if _, addr, ok := strings.Cut(l, "://"); ok {
			out = append(out, addr)
		}
	}
	return out
}

// TestComposeObservability checks that Prometheus scrapes the projector where
// compose runs it and loads the alerts, and that Grafana finds its data
// source and dashboard at the paths compose mounts.
func TestComposeObservability(t *testing.T) {
	c := readCompose(t)
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus.yml", &prom)
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName == "projector" {
			for _, st := range sc.StaticConfigs {
				targets = append(targets, st.Targets...)
			}
		}
	}
	_, port, _ := net.SplitHostPort(c.service(t, "projector").Environment["PROJECTOR_HTTP_ADDR"])
	if want := []string{"projector:" + port}; !slices.Equal(targets, want) {
		t.Errorf("prometheus.yml job projector scrapes %q, want %q", targets, want)
	}
	promMounts := mounts(c.service(t, "prometheus"))
	if promMounts["/etc/prometheus/prometheus.yml"] != "./deploy/prometheus.yml" {
		t.Errorf("prometheus mounts %v, want ./deploy/prometheus.yml at /etc/prometheus/prometheus.yml", promMounts)
	}
	for _, rf := range prom.RuleFiles {
		if promMounts[filepath.Join("/etc/prometheus", rf)] != "./deploy/"+rf {
			t.Errorf("prometheus.yml loads %s, which compose does not mount from ./deploy/%s", rf, rf)
		}
	}

	var datasources struct {
		Datasources []struct {
			UID string `yaml:"uid"`
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &datasources)
	if len(datasources.Datasources) != 1 || datasources.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana data sources = %+v, want one at http://prometheus:9090", datasources.Datasources)
	}
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/dashboards.yml", &providers)
	grafana := c.service(t, "grafana")
	gm := mounts(grafana)
	if gm["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" {
		t.Errorf("grafana mounts %v, want ./deploy/grafana/provisioning at /etc/grafana/provisioning", gm)
	}
	if len(providers.Providers) != 1 || gm[providers.Providers[0].Options.Path] != "./deploy/grafana/dashboards" {
		t.Errorf("grafana dashboard providers = %+v, mounts %v; want one whose path compose mounts from ./deploy/grafana/dashboards", providers.Providers, gm)
	}
	home := grafana.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if dir, file := filepath.Split(home); gm[filepath.Clean(dir)] != "./deploy/grafana/dashboards" || file != "projector.json" {
		t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH = %q, want projector.json in the mounted dashboards", home)
	}
}

// mounts returns a service's bind mounts, source by target.
func mounts(s composeService) map[string]string {
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") {
			out[parts[1]] = parts[0]
		}
	}
	return out
}

// TestComposeDemo checks the demo: only with --profile demo, built from the
// demo stage, configured by variables `projector publish` and the script read.
func TestComposeDemo(t *testing.T) {
	d := readCompose(t).service(t, "demo")
	if !slices.Equal(d.Profiles, []string{"demo"}) {
		t.Errorf("demo profiles = %q, want [demo]", d.Profiles)
	}
	if d.Build == nil || d.Build.Dockerfile != "deploy/Dockerfile" || d.Build.Target != "demo" {
		t.Errorf("demo build = %+v, want deploy/Dockerfile, target demo", d.Build)
	}
	script, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	flags := envNames(t, "publish")
	for k := range d.Environment {
		_, isFlag := flags[k]
		if !isFlag && !(strings.HasPrefix(k, "DEMO_") && strings.Contains(string(script), k)) {
			t.Errorf("demo sets %s: neither a flag of `projector publish` nor a DEMO_ variable of demo.sh", k)
		}
	}
	if got := d.Environment["PROJECTOR_BROKERS"]; got != readCompose(t).service(t, "projector").Environment["PROJECTOR_BROKERS"] {
		t.Errorf("demo PROJECTOR_BROKERS = %q, want the projector's", got)
	}
}
