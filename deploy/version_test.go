package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// version is the VERSION file: what the images built from this tree are
// called and report, and what the manifests run.
func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$`).MatchString(v) {
		t.Fatalf("VERSION = %q, want a semantic version such as 0.3.0 or 0.3.0-dev", v)
	}
	return v
}

// pinned matches an image reference pinned by digest.
var pinned = regexp.MustCompile(`^[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}$`)

// Issue 28: the base images were named by tag alone, so one commit built
// on whatever the tag meant that day.
func TestBaseImagesPinnedByDigest(t *testing.T) {
	for _, s := range readDockerfile(t, "Dockerfile") {
		if !pinned.MatchString(s.from) {
			t.Errorf("FROM %s: want tag@sha256:<digest>", s.from)
		}
	}
}

// Issue 28: the manifests ran projector:latest, and the image built as the
// Dockerfile says reported (devel). Every image of the projector that the
// manifests and compose name is the VERSION file's, and the kustomization
// sets it in one place.
func TestDeploymentsNameTheirVersion(t *testing.T) {
	want := "projector:" + version(t)
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		var m manifest
		readYAML(t, f, &m)
		pods := []podTemplate{m.Spec.Template, m.Spec.JobTemplate.Spec.Template}
		for _, pod := range pods {
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				seen++
				if c.Image != want {
					t.Errorf("%s: container %s runs %q, want %q", f, c.Name, c.Image, want)
				}
			}
		}
	}
	if seen < 4 {
		t.Errorf("%d projector containers in deploy/k8s, want the StatefulSet's, the two CronJobs' and the replay Job's", seen)
	}
	k := readManifests(t)["Kustomization"]
	if len(k.Images) != 1 || k.Images[0].Name != "projector" || k.Images[0].NewTag != version(t) {
		t.Errorf("kustomization.yaml images = %+v, want projector at %s", k.Images, version(t))
	}
	c := readCompose(t)
	for name, image := range map[string]string{"projector": want, "demo": "projector-demo:" + version(t)} {
		if got := c.Services[name].Image; got != image {
			t.Errorf("compose service %s: image %q, want %q", name, got, image)
		}
	}
}

// The documented build stamps the VERSION file's version when no
// --build-arg VERSION is given: the build stage's RUN, run here as it runs
// in the image (without Docker: the cache mounts dropped, the output
// moved), yields a binary whose projector version names it.
func TestImageBuildReportsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary as the image does")
	}
	var run string
	for _, r := range readDockerfile(t, "Dockerfile")[0].all("RUN") {
		if strings.Contains(r, "go build") {
			run = r
		}
	}
	var fields []string
	for _, f := range strings.Fields(run) {
		if !strings.HasPrefix(f, "--mount=") {
			fields = append(fields, f)
		}
	}
	out := filepath.Join(t.TempDir(), "projector")
	script := strings.ReplaceAll(strings.Join(fields, " "), "/out/projector", out)
	build := exec.Command("sh", "-c", script)
	build.Dir = ".."
	build.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "VERSION=") || strings.HasPrefix(kv, "REVISION=")
	}), "REVISION=0123abc")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the build stage's RUN: %v\n%s\n%s", err, script, b)
	}
	v := exec.Command(out, "version")
	b, err := v.CombinedOutput()
	if err != nil {
		t.Fatalf("projector version: %v\n%s", err, b)
	}
	if got := string(b); !strings.Contains(got, "v"+version(t)) || !strings.Contains(got, "0123abc") || strings.Contains(got, "(devel)") {
		t.Errorf("projector version of the image's build printed %q, want v%s and revision 0123abc", got, version(t))
	}
}
