// Package deploy checks the deployment files in this directory and
// docker-compose.yml against the service they deploy: that the environment
// they set names real flags of the projector binary, that the Prometheus
// configuration, alert rules and dashboard are valid (with promtool), and that
// the Kubernetes manifests keep the promises of deploy/k8s/README.md.
//
// Nothing here runs Docker or Kubernetes; the files are parsed and checked.
package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/projector/projector/internal/config"
	"github.com/projector/projector/internal/testenv"
)

// bin is the projector binary, built once by TestMain, whose -h output is
// the truth about which flags exist.
var bin string

func TestMain(m *testing.M) {
	testenv.MainWithBinary(m, "../cmd/projector", &bin)
}

// flagLine is a flag's first line in the usage of the flag package:
// two spaces, a dash, the name, and its type unless it is a bool.
var flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)`)

// defaultValue is the default the flag package prints at the end of a
// flag's description.
var defaultValue = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)

// flagsOf returns the flags of a projector subcommand, by name, with their
// default values ("" when the usage shows none), read from `projector
// <command> -h`.
func flagsOf(t *testing.T, command string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, command, "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{} // no PROJECTOR_* of the test's environment in the defaults
	if err := cmd.Run(); err != nil {
		t.Fatalf("projector %s -h: %v\n%s", command, err, out.String())
	}
	flags := map[string]string{}
	var current string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			flags[current] = ""
			continue
		}
		if m := defaultValue.FindStringSubmatch(strings.TrimSpace(line)); m != nil && current != "" {
			flags[current] = m[1]
		}
	}
	if len(flags) == 0 {
		t.Fatalf("projector %s -h listed no flags:\n%s", command, out.String())
	}
	return flags
}

// envNames returns the environment variable of every flag of a command, by
// variable: PROJECTOR_SOME_NAME -> some-name.
func envNames(t *testing.T, command string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name := range flagsOf(t, command) {
		out[config.EnvName(name)] = name
	}
	return out
}

// readYAML decodes one YAML file of the repository into v.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
