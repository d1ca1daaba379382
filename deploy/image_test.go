package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	op   string // upper case: FROM, RUN, COPY...
	args string
}

// stage is one FROM of a Dockerfile and what follows it.
type stage struct {
	from         string // the image
	name         string // after AS; "" for an unnamed stage
	instructions []instruction
}

// readDockerfile splits a Dockerfile into stages. It knows comments, line
// continuations and FROM ... AS name; that is all this Dockerfile uses.
func readDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var pending string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		op, args, _ := strings.Cut(line, " ")
		in := instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)}
		if in.op == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before the first FROM", path, in.op)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	return stages
}

// last returns the arguments of a stage's last instruction op, "" if none.
func (s stage) last(op string) string {
	out := ""
	for _, in := range s.instructions {
		if in.op == op {
			out = in.args
		}
	}
	return out
}

func (s stage) all(op string) []string {
	var out []string
	for _, in := range s.instructions {
		if in.op == op {
			out = append(out, in.args)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t, "Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}
	build := stages[0]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		t.Errorf("build stage from %s, want golang:1.26", build.from)
	}
	compile := strings.Join(build.all("RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w `, "buildinfo.version=${version}", `version="${VERSION:-v$(cat VERSION)}"`, "buildinfo.revision=${REVISION}", "./cmd/projector", "--mount=type=cache,target=/go/pkg/mod"} {
		if !strings.Contains(compile, want) {
			t.Errorf("build stage RUN lacks %s:\n%s", want, compile)
		}
	}

	// The last stage is what `docker build` without --target produces.
	final := stages[len(stages)-1]
	if final.name != "" || !(strings.HasPrefix(final.from, "gcr.io/distroless/static") || final.from == "scratch") {
		t.Errorf("final stage = FROM %s AS %q, want an unnamed distroless static or scratch stage", final.from, final.name)
	}
	tests := []struct {
		op, want string
	}{
		{"USER", "65532:65532"},
		{"EXPOSE", "8080"},
		{"ENTRYPOINT", `["/usr/local/bin/projector"]`},
		{"CMD", `["run"]`},
	}
	for _, tt := range tests {
		if got := final.last(tt.op); got != tt.want {
			t.Errorf("final stage %s = %q, want %q", tt.op, got, tt.want)
		}
	}
	if uid, _, _ := strings.Cut(final.last("USER"), ":"); uid == "0" || uid == "root" {
		t.Errorf("final stage runs as %s, want a non-root user", uid)
	}

	// Every COPY from the build context names a file that exists and that
	// .dockerignore lets through.
	ignored := dockerignore(t)
	for _, s := range stages {
		for _, c := range s.all("COPY") {
			if strings.HasPrefix(c, "--from=") {
				continue
			}
			f := strings.Fields(c)
			for _, src := range f[:len(f)-1] {
				if strings.HasPrefix(src, "--") {
					continue
				}
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
				if slices.Contains(ignored, src) {
					t.Errorf("COPY %s, which .dockerignore excludes", src)
				}
			}
		}
	}
}

func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func TestDockerignore(t *testing.T) {
	got := dockerignore(t)
	for _, want := range []string{".cache", ".services", "bin", ".git"} {
		if !slices.Contains(got, want) {
			t.Errorf(".dockerignore = %q, want it to exclude %s", got, want)
		}
	}
}

// TestDemoScript runs demo.sh for a few rounds with a stand-in for
// `projector publish` that keeps what it reads, and checks that every line
// is what publish accepts: a JSON object with a string document_key.
func TestDemoScript(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "published")
	stub := "#!/bin/sh\ncat >> " + strconv.Quote(out) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "projector"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	cmd := exec.Command("sh", "demo.sh")
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"),
		"DEMO_ROUNDS="+strconv.Itoa(rounds), "DEMO_INTERVAL=0", "DEMO_DOCUMENTS=10")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// Per round: 10 documents, a redelivery, a stale one, a conflict, a bad one.
	if want := rounds * (10 + 4); len(lines) != want {
		t.Errorf("demo.sh published %d lines in %d rounds, want %d", len(lines), rounds, want)
	}
	for i, l := range lines {
		var doc struct {
			Key *string `json:"document_key"`
		}
		if err := json.Unmarshal([]byte(l), &doc); err != nil || doc.Key == nil {
			t.Errorf("line %d = %s: not a JSON object with a string document_key (%v)", i+1, l, err)
		}
	}
}
