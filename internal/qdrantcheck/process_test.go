package qdrantcheck

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/projector/projector/internal/testenv"
	"github.com/projector/projector/internal/testtls"
)

// server is one Qdrant server process of PROJECTOR_TEST_QDRANT_BIN, on
// ports and storage of its own, with the QDRANT__ variables a test gives.
type server struct {
	*testenv.Qdrant
	t *testing.T
}

func newServer(t *testing.T, env ...string) *server {
	t.Helper()
	return &server{Qdrant: testenv.NewQdrant(t, env...), t: t}
}

// engineOnly skips a test of what qdrant-engine adds to the server, when
// the binary is a real Qdrant server.
func engineOnly(t *testing.T) {
	t.Helper()
	out, err := exec.Command(os.Getenv("PROJECTOR_TEST_QDRANT_BIN"), "--version").Output()
	if err != nil || !strings.Contains(string(out), "qdrant-engine") {
		t.Skip("tests qdrant-engine's own storage rules; PROJECTOR_TEST_QDRANT_BIN is not qdrant-engine")
	}
}

func (s *server) client(cfg qdrant.Config) *qdrant.Client {
	s.t.Helper()
	cfg.Host, cfg.Port, cfg.SkipCompatibilityCheck = "127.0.0.1", s.GRPCPort, true
	c, err := qdrant.NewClient(&cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func createCollection(t *testing.T, c *qdrant.Client, name string, shards uint32) {
	t.Helper()
	err := c.CreateCollection(ctx(t), &qdrant.CreateCollection{
		CollectionName: name, ShardNumber: qdrant.PtrOf(shards),
		VectorsConfig: qdrant.NewVectorsConfig(&qdrant.VectorParams{Size: 4, Distance: qdrant.Distance_Cosine}),
	})
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// TestKillLosesNothingAcknowledged streams upserts, with wait and without,
// kills the server with SIGKILL in the middle, restarts it on the same
// storage and requires every point whose upsert was answered.
func TestKillLosesNothingAcknowledged(t *testing.T) {
	s := newServer(t)
	s.Start()
	s.WaitReady(60 * time.Second)
	c := s.client(qdrant.Config{})
	createCollection(t, c, "killed", 2)

	var (
		mu    sync.Mutex
		acked []uint64
	)
	stream, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for batch := uint64(0); stream.Err() == nil; batch++ {
			points := make([]*qdrant.PointStruct, 50)
			for i := range points {
				id := batch*50 + uint64(i) + 1
				points[i] = &qdrant.PointStruct{Id: qdrant.NewIDNum(id), Vectors: qdrant.NewVectors(float32(id), 1, 0, 0)}
			}
			// Every other batch without wait: answered once taken, applied later.
			_, err := c.Upsert(stream, &qdrant.UpsertPoints{CollectionName: "killed", Points: points, Wait: qdrant.PtrOf(batch%2 == 0)})
			if err != nil {
				return
			}
			mu.Lock()
			for _, p := range points {
				acked = append(acked, p.GetId().GetNum())
			}
			mu.Unlock()
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	s.Kill()
	cancel()
	<-done
	mu.Lock()
	want := append([]uint64(nil), acked...)
	mu.Unlock()
	if len(want) == 0 {
		t.Fatal("no upsert was answered before the kill")
	}

	s.Start()
	s.WaitReady(60 * time.Second)
	c = s.client(qdrant.Config{})
	ids := make([]*qdrant.PointId, len(want))
	for i, id := range want {
		ids[i] = qdrant.NewIDNum(id)
	}
	got, err := c.Get(ctx(t), &qdrant.GetPoints{CollectionName: "killed", Ids: ids})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("after SIGKILL and a restart %d of the %d acknowledged points are there", len(got), len(want))
	}
	t.Logf("%d points acknowledged before the kill, %d there after the restart", len(want), len(got))
}

// TestAPIKeyAndTLS starts a server with an API key and TLS on both ports
// and calls it as a client of the projector does.
func TestAPIKeyAndTLS(t *testing.T) {
	ca := testtls.NewCA(t, "qdrantcheck")
	pair := ca.Server("127.0.0.1", "localhost")
	s := newServer(t,
		"QDRANT__SERVICE__API_KEY=the-key-1",
		"QDRANT__SERVICE__ENABLE_TLS=true",
		"QDRANT__TLS__CERT="+pair.CertFile,
		"QDRANT__TLS__KEY="+pair.KeyFile,
	)
	s.Start()
	s.WaitReadyTLS(60 * time.Second)
	tlsConf := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	cases := []struct {
		name string
		key  string
		want codes.Code
	}{
		{"the key", "the-key-1", codes.OK},
		{"another key", "the-key-2", codes.Unauthenticated},
		{"a longer key", "the-key-1-and-more", codes.Unauthenticated},
		{"no key", "", codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := s.client(qdrant.Config{APIKey: tc.key, UseTLS: true, TLSConfig: tlsConf})
			_, err := c.ListCollections(ctx(t))
			if got := status.Code(err); got != tc.want {
				t.Errorf("ListCollections with %s: got %s (%v), want %s", tc.name, got, err, tc.want)
			}
			// The health check needs no key, as on the server.
			if _, err := c.HealthCheck(ctx(t)); err != nil {
				t.Errorf("HealthCheck with %s: %v", tc.name, err)
			}
		})
	}
	plain := s.client(qdrant.Config{APIKey: "the-key-1"})
	if _, err := plain.ListCollections(ctx(t)); err == nil {
		t.Error("a call without TLS to a TLS port succeeded")
	}
}

// TestRefusesAQdrantServersStorage starts qdrant-engine on a storage laid
// out as a Qdrant server's (collections with a config.json): it must exit
// saying why, with every file left as it was.
func TestRefusesAQdrantServersStorage(t *testing.T) {
	engineOnly(t)
	s := newServer(t)
	files := map[string]string{
		"collections/users/config.json":                     `{"params":{"vectors":{"size":4,"distance":"Cosine"}}}`,
		"collections/users/0/segments/3f1e/segment.json":    `{"version":1}`,
		"collections/users/0/wal/open-1":                    "wal",
		"collections/users/0/shard_config.json":             `{"type":"Local"}`,
		"aliases/data.json":                                 `{}`,
		"raft_state.json":                                   `{}`,
		"collections/users/0/segments/3f1e/payload_storage": "",
	}
	for name, body := range files {
		path := filepath.Join(s.Storage(), name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.Start()
	select {
	case <-s.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("qdrant-engine started on a Qdrant server's storage")
	}
	if code := s.ExitCode(); code == 0 {
		t.Errorf("exit code 0 on a Qdrant server's storage")
	}
	if log := s.Log(); !strings.Contains(log, "holds a Qdrant server's storage") {
		t.Errorf("the log does not say why it stopped:\n%s", log)
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(s.Storage(), name))
		if err != nil || string(got) != body {
			t.Errorf("%s: got %q (%v), want it kept as %q", name, got, err, body)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Storage(), ".qdrant-engine")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a marker was added to the server's storage: %v", err)
	}
}

// TestLeftoversAtStart starts qdrant-engine on its own storage with what a
// killed create and a killed delete leave, a directory it did not make and
// a collection it cannot load: it clears its own leftovers, keeps the rest,
// and serves the collections it can load.
func TestLeftoversAtStart(t *testing.T) {
	engineOnly(t)
	s := newServer(t)
	s.Start()
	s.WaitReady(60 * time.Second)
	c := s.client(qdrant.Config{})
	createCollection(t, c, "good", 1)
	createCollection(t, c, "broken", 1)
	s.Stop()

	cols := filepath.Join(s.Storage(), "collections")
	marker, err := os.ReadFile(filepath.Join(cols, "good", ".qdrant-engine"))
	if err != nil {
		t.Fatalf("a collection has no marker: %v", err)
	}
	for _, left := range []string{".creating-1", ".deleted-2"} {
		if err := os.MkdirAll(filepath.Join(cols, left, "shard"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cols, left, ".qdrant-engine"), marker, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, foreign := range []string{".deleted-3", "theirs"} {
		if err := os.MkdirAll(filepath.Join(cols, foreign), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cols, "broken", "collection.pb"), []byte("\xff\xff not a message"), 0o644); err != nil {
		t.Fatal(err)
	}

	s.Start()
	s.WaitReady(60 * time.Second)
	for _, gone := range []string{".creating-1", ".deleted-2"} {
		if _, err := os.Stat(filepath.Join(cols, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", gone, err)
		}
	}
	for _, kept := range []string{".deleted-3", "theirs", "broken"} {
		if _, err := os.Stat(filepath.Join(cols, kept)); err != nil {
			t.Errorf("%s is gone: %v", kept, err)
		}
	}
	c = s.client(qdrant.Config{})
	names, err := c.ListCollections(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "good" {
		t.Errorf("collections served: %v, want [good]", names)
	}
	if log := s.Log(); !strings.Contains(log, "collection broken cannot be loaded") {
		t.Errorf("the log does not name the collection it cannot load:\n%s", log)
	}
}
