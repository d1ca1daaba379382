package services

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakes replaces the runner's table with services that only record what
// was done to them, in order, as "verb name"; up says which run.
type fakes struct {
	calls []string
	up    map[string]bool
}

func (f *fakes) install(r *Runner, names ...string) {
	r.table = nil
	for _, n := range names {
		optIn := strings.HasPrefix(n, "kafka-")
		dir := filepath.Join(r.cfg.servicesDir(), n)
		r.table = append(r.table, service{
			name:  n,
			optIn: optIn,
			addr:  func() string { return "127.0.0.1:" + n },
			up:    func(context.Context) bool { return f.up[n] },
			start: func(context.Context) error { f.calls = append(f.calls, "start "+n); f.up[n] = true; return nil },
			wait:  func(context.Context) error { f.calls = append(f.calls, "wait "+n); return nil },
			stop:  func(context.Context) error { f.calls = append(f.calls, "stop "+n); f.up[n] = false; return nil },
			kill:  func(context.Context) error { f.calls = append(f.calls, "kill "+n); f.up[n] = false; return nil },
			data:  func(context.Context) []string { return []string{dir} },
		})
	}
}

func newFakes(t *testing.T, cluster bool) (*Runner, *fakes, *strings.Builder) {
	t.Helper()
	r, _, _ := newTestRunner(t)
	r.cfg.Cluster = cluster
	f := &fakes{up: map[string]bool{}}
	f.install(r, "postgres", "kafka", "kafka-1", "kafka-2", "kafka-3", "neo4j", "qdrant")
	out := &strings.Builder{}
	r.stdout = out
	return r, f, out
}

func TestCommandsWalkTheTable(t *testing.T) {
	tests := []struct {
		name    string
		cluster bool
		args    []string
		env     []string // SERVICES
		want    string
	}{
		{"up starts all, then waits for each", false, []string{"up"}, nil,
			"start postgres,start kafka,start neo4j,start qdrant,wait postgres,wait kafka,wait neo4j,wait qdrant"},
		{"up with the cluster", true, []string{"up"}, nil,
			"start postgres,start kafka,start kafka-1,start kafka-2,start kafka-3,start neo4j,start qdrant," +
				"wait postgres,wait kafka,wait kafka-1,wait kafka-2,wait kafka-3,wait neo4j,wait qdrant"},
		{"names in start order", false, []string{"start", "qdrant", "postgres"}, nil, "start postgres,start qdrant,wait postgres,wait qdrant"},
		{"SERVICES", false, []string{"up"}, []string{"kafka", "postgres"}, "start postgres,start kafka,wait postgres,wait kafka"},
		{"names win over SERVICES", false, []string{"up", "neo4j"}, []string{"kafka"}, "start neo4j,wait neo4j"},
		{"stop in reverse", false, []string{"stop", "postgres", "kafka"}, nil, "stop kafka,stop postgres"},
		{"restart", false, []string{"restart", "kafka"}, nil, "stop kafka,start kafka,wait kafka"},
		{"kill", true, []string{"kill", "kafka-2"}, nil, "kill kafka-2"},
		{"a node by name without the variable", false, []string{"start", "kafka-2"}, nil, "start kafka-2,wait kafka-2"},
		{"down with names stops those", false, []string{"down", "neo4j"}, nil, "stop neo4j"},
		{"down stops the cluster too, whatever the variable", false, []string{"down"}, nil,
			"stop qdrant,stop neo4j,stop kafka-3,stop kafka-2,stop kafka-1,stop kafka,stop postgres"},
		{"env touches nothing", false, []string{"env"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, f, _ := newFakes(t, tt.cluster)
			r.cfg.Services = tt.env
			if err := os.MkdirAll(filepath.Join(r.cfg.Root, "qdrant-engine"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(filepath.Join(r.cfg.Root, "qdrant-engine"), os.DirFS("testdata/engine")); err != nil {
				t.Fatal(err)
			}
			if err := r.Run(context.Background(), "scripts/services.sh", tt.args); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(f.calls, ","); got != tt.want {
				t.Errorf("%v did\n%s\nwant\n%s", tt.args, got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	r, f, out := newFakes(t, false)
	f.up["postgres"], f.up["neo4j"] = true, true
	err := r.Run(context.Background(), "scripts/services.sh", []string{"status"})
	if !errors.Is(err, ErrDown) {
		t.Errorf("status with services down = %v, want ErrDown (exit 1)", err)
	}
	want := "postgres  up    127.0.0.1:postgres\n" +
		"kafka     down  127.0.0.1:kafka\n" +
		"neo4j     up    127.0.0.1:neo4j\n" +
		"qdrant    down  127.0.0.1:qdrant\n"
	if out.String() != want {
		t.Errorf("status printed\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := r.Run(context.Background(), "scripts/services.sh", []string{"status", "neo4j", "postgres"}); err != nil {
		t.Errorf("status of running services = %v, want nil (exit 0)", err)
	}
	if want := "neo4j     up    127.0.0.1:neo4j\npostgres  up    127.0.0.1:postgres\n"; out.String() != want {
		t.Errorf("status in the order given printed\n%s\nwant\n%s", out.String(), want)
	}
}

// TestUsageErrors: the messages of the script, word for word.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		cluster bool
		args    []string
		want    string
	}{
		{false, nil, "usage: scripts/services.sh up|down|status|env|clean [SERVICE...] | start|stop|restart|kill SERVICE..."},
		{false, []string{"stop"}, "stop needs a service name (one of: postgres kafka neo4j qdrant)"},
		{true, []string{"kill"}, "kill needs a service name (one of: postgres kafka kafka-1 kafka-2 kafka-3 neo4j qdrant)"},
		{false, []string{"up", "redis"}, "unknown service 'redis' (one of: postgres kafka neo4j qdrant)"},
		{false, []string{"frobnicate"}, "unknown command 'frobnicate'"},
	}
	for _, tt := range tests {
		r, f, _ := newFakes(t, tt.cluster)
		err := r.Run(context.Background(), "scripts/services.sh", tt.args)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
		if len(f.calls) > 0 {
			t.Errorf("%v: did %v, want nothing", tt.args, f.calls)
		}
	}
}

func TestClean(t *testing.T) {
	r, f, _ := newFakes(t, false)
	for _, n := range []string{"kafka", "neo4j"} {
		if err := os.MkdirAll(filepath.Join(r.cfg.servicesDir(), n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.cfg.logFile(n), []byte("log\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Run(context.Background(), "scripts/services.sh", []string{"clean", "kafka"}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		filepath.Join(r.cfg.servicesDir(), "kafka"): false, r.cfg.logFile("kafka"): false,
		filepath.Join(r.cfg.servicesDir(), "neo4j"): true, r.cfg.logFile("neo4j"): true,
	} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("after clean kafka, %s exists: %v, want %v", path, err == nil, want)
		}
	}
	if got := strings.Join(f.calls, ","); got != "stop kafka" {
		t.Errorf("clean kafka did %s, want stop kafka", got)
	}
	// Everything: every service stops, the cluster's too, and .services goes.
	f.calls = nil
	if err := r.Run(context.Background(), "scripts/services.sh", []string{"clean"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.cfg.servicesDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".services after clean: %v, want it gone", err)
	}
	if got := strings.Join(f.calls, ","); !strings.Contains(got, "stop kafka-2") {
		t.Errorf("clean did %s, want the cluster's nodes stopped before their data goes", got)
	}
}

// TestTable: the services in start order, PostgreSQL first (the others do
// not need it, but a failure there is the cheapest to report), the cluster
// only on request.
func TestTable(t *testing.T) {
	for _, tt := range []struct {
		cluster bool
		want    string
	}{{false, "postgres kafka neo4j qdrant"}, {true, "postgres kafka kafka-1 kafka-2 kafka-3 neo4j qdrant"}} {
		r := New(Config{Cluster: tt.cluster}, nil, nil)
		if got := strings.Join(r.defaults(), " "); got != tt.want {
			t.Errorf("cluster %v: default services %q, want %q", tt.cluster, got, tt.want)
		}
		if got := strings.Join(r.everything(), " "); got != "postgres kafka kafka-1 kafka-2 kafka-3 neo4j qdrant" {
			t.Errorf("cluster %v: the table is %q", tt.cluster, got)
		}
	}
}
