package bench

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
	"github.com/projector/projector/internal/testenv"
)

// TestMain fails the run if a goroutine outlives the tests: measurements
// run writers concurrently and must wait for them, and close every client
// they open. The HTTP client's idle connections to the service's /metrics
// are meant to outlive calls.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// TestRunSmall runs the whole benchmark on a tiny corpus against the real
// services and checks that it reports sane figures. It asserts nothing
// about speed: the machine is shared.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the projector against the real services")
	}
	brokers := testenv.Brokers(t)
	neoURI := testenv.Neo4jURI(t)
	dsn := testenv.PostgresDSN(t)
	qdrantAddr := testenv.QdrantAddr(t)
	bin := buildProjector(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	user, password := os.Getenv("PROJECTOR_NEO4J_USER"), os.Getenv("PROJECTOR_NEO4J_PASSWORD")
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	driver, err := neo4j.NewDriverWithContext(neoURI, auth)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close(ctx)
	const dim = 16
	var progress strings.Builder
	rep, err := Run(ctx, Config{
		Documents: 200, Partitions: []int{1}, Seed: 3, Runs: 1, NaiveChunks: 40,
		BatchRecords: 500, MaxBatchChunks: 4096, Dim: dim, Timeout: 5 * time.Minute, IndexSettle: time.Minute,
		VariantArgs: []string{"--batches-in-flight", "1"},
	}, Deps{
		Kafka: []kgo.Opt{kgo.SeedBrokers(brokers...)},
		OpenStores: func(ctx context.Context, collection, schema string) (*Stores, error) {
			idx, err := index.Open(index.Config{Addr: qdrantAddr, Collection: collection, Dim: dim})
			if err != nil {
				return nil, err
			}
			gr, err := graph.Open(graph.Config{URI: neoURI, User: user, Password: password})
			if err != nil {
				return nil, err
			}
			rel, err := postgres.Open(ctx, dsn, schema)
			if err != nil {
				return nil, err
			}
			return &Stores{Index: idx, Graph: gr, Relational: rel}, nil
		},
		CloseStores: func(ctx context.Context, s *Stores) {
			_ = s.Index.Close()
			_ = s.Graph.Close(ctx)
			s.Relational.Close()
		},
		Neo4j:    driver,
		Service:  Service{Path: bin, Env: append(os.Environ(), "PROJECTOR_VECTOR_DIM=16")},
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("bench: %v\nprogress:\n%s", err, progress.String())
	}
	if got := len(rep.Partitions); got != 1 || len(rep.Partitions[0].Rounds) != 1 {
		t.Fatalf("got %d partition results, want 1 with 1 round", got)
	}
	r := rep.Partitions[0].Rounds[0]
	if r.Naive == nil || r.Count == nil || r.Variant == nil {
		t.Fatalf("naive %v, count %v, variant %v: want every measurement", r.Naive, r.Count, r.Variant)
	}
	for name, m := range map[string]Measurement{"ceiling": r.Ceiling, "count": *r.Count, "ids": r.IDs, "naive": *r.Naive, "variant": *r.Variant} {
		if !positive(m.DocumentsPerSecond()) || !positive(m.ChunksPerSecond()) {
			t.Errorf("%s: %.1f documents/s and %.1f chunks/s, want both > 0", name, m.DocumentsPerSecond(), m.ChunksPerSecond())
		}
	}
	for name, m := range map[string]Measurement{"count": *r.Count, "ids": r.IDs, "variant": *r.Variant} {
		if m.PeakRSS <= 0 || m.BatchRecords <= 0 {
			t.Errorf("%s: peak RSS %d, batch records %.1f; want both > 0", name, m.PeakRSS, m.BatchRecords)
		}
		s := m.Shares
		for part, v := range map[string]float64{"index": s.Index, "graph": s.Graph, "relational": s.Relational, "fence": s.Fence} {
			if !positive(v) || v > 1 {
				t.Errorf("%s: %s share %.3f, want in (0, 1]", name, part, v)
			}
		}
	}
	if r.Count.Chunks != rep.Chunks || r.Naive.Chunks != 40 {
		t.Errorf("chunks written: end to end %d, naive %d; want %d and 40", r.Count.Chunks, r.Naive.Chunks, rep.Chunks)
	}
	ratios := r.Ratios()
	for name, v := range map[string]float64{
		"count/ceiling": ratios.CountToCeiling, "ids/ceiling": ratios.IDsToCeiling,
		"count/naive": ratios.CountToNaive, "ids/naive": ratios.IDsToNaive, "variant/ids": ratios.VariantToIDs,
	} {
		if !positive(v) {
			t.Errorf("ratio %s = %v, want > 0", name, v)
		}
	}
	var out strings.Builder
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"raw-store ceiling", "end-to-end, count fences", "end-to-end, id fences", "naive (per chunk)", "count / ceiling", "end-to-end, id fences, variant", "variant / ids"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("report:\n%s", out.String())
}

func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// buildProjector builds the projector binary the benchmark runs as the
// service.
func buildProjector(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "projector")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/projector").CombinedOutput()
	if err != nil {
		t.Fatalf("build projector: %v\n%s", err, out)
	}
	return bin
}
