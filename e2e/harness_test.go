package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/testenv"
)

// bin is the projector binary under test, built once by TestMain with the
// faults build tag, which adds the test-only fault points.
var bin string

// With -short it runs nothing: these tests run the projector as real
// processes against the real services, and some stop and start those
// services (scripts/services.sh), which go test -short ./... must not.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped with -short (real processes against the real services)")
		os.Exit(0)
	}
	testenv.MainWithBinary(m, "../cmd/projector", &bin, "-tags", "faults")
}

// world is one test's private slice of the shared services: its own topic,
// group, dead-letter topic, Qdrant collection, PostgreSQL schema and document
// key prefix (Neo4j community has one database, so tests share it).
type world struct {
	t          *testing.T
	name       string
	brokers    string
	topic      string
	dlqTopic   string
	group      string
	collection string
	schema     string
	prefix     string
	partitions int
	// qdrantAddr, when set, replaces PROJECTOR_QDRANT_ADDR for the service.
	qdrantAddr string

	kcl *kgo.Client
	adm *kadm.Client
	pg  *pgxpool.Pool
	neo neo4j.DriverWithContext
	qd  *qdrant.Client
}

// worldOption changes how newWorld sets a world up.
type worldOption func(*worldSetup)

// worldSetup is what a worldOption may change: the brokers (by default the
// single broker of testenv.Brokers) and the topic's replication and configs.
type worldSetup struct {
	brokers     func(testing.TB) []string
	replication int16
	topicConfig map[string]*string
}

func newWorld(t *testing.T, partitions int, opts ...worldOption) *world {
	t.Helper()
	setup := worldSetup{brokers: testenv.Brokers, replication: 1}
	for _, o := range opts {
		o(&setup)
	}
	brokers := setup.brokers(t)
	dsn := testenv.PostgresDSN(t)
	neoURI := testenv.Neo4jURI(t)
	qdAddr := testenv.QdrantAddr(t)
	id := fmt.Sprintf("%s_%d", identifier(t.Name()), time.Now().UnixNano()%1e9)
	w := &world{
		t: t, name: id, brokers: strings.Join(brokers, ","),
		topic: "e2e." + id, dlqTopic: "e2e." + id + ".dlq", group: "e2e." + id,
		collection: "e2e_" + id, schema: "e2e_" + id, prefix: id + "/", partitions: partitions,
	}
	ctx := context.Background()
	var err error
	w.kcl, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	w.adm = kadm.NewClient(w.kcl)
	if _, err := w.adm.CreateTopic(ctx, int32(partitions), setup.replication, setup.topicConfig, w.topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	w.pg, err = pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	w.neo, err = neo4j.NewDriverWithContext(neoURI, neo4j.NoAuth())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(qdAddr)
	var portN int
	fmt.Sscan(port, &portN)
	w.qd, err = qdrant.NewClient(&qdrant.Config{Host: host, Port: portN, SkipCompatibilityCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// identifier turns a test name into something every store accepts as a
// name: lower-case letters, digits and _, at most 40 characters.
func identifier(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

func (w *world) close() {
	ctx := context.Background()
	_, _ = w.adm.DeleteTopics(ctx, w.topic, w.dlqTopic)
	_, _ = w.adm.DeleteGroup(ctx, w.group)
	_, _ = w.pg.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{w.schema}.Sanitize()+" CASCADE")
	if err := testenv.DeleteGraph(ctx, w.neo, w.prefix, w.topic); err != nil {
		w.t.Errorf("the graph keeps nodes of this test: %v", err)
	}
	_ = index.DropCollections(ctx, w.qd, w.collection)
	if names, err := w.qd.ListCollections(ctx); err == nil {
		for _, name := range names {
			if name == w.collection || strings.HasPrefix(name, w.collection+"_") {
				w.t.Errorf("the index keeps collection %s of this test", name)
			}
		}
	}
	_ = w.qd.Close()
	_ = w.neo.Close(ctx)
	w.pg.Close()
	w.kcl.Close()
}

// key returns a document key private to this world.
func (w *world) key(name string) string { return w.prefix + name }

// runArgs are the flags of `projector run` for this world.
func (w *world) runArgs(httpAddr string) []string {
	args := []string{"run",
		"--brokers", w.brokers, "--topic", w.topic, "--group", w.group, "--dlq-topic", w.dlqTopic,
		"--qdrant-collection", w.collection, "--postgres-schema", w.schema, "--http-addr", httpAddr,
		"--retry-max", "2s",
	}
	if w.qdrantAddr != "" {
		args = append(args, "--qdrant-addr", w.qdrantAddr)
	}
	return args
}

// proc is a running projector process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	log  *syncBuffer
	done chan struct{}
	err  error
}

// syncBuffer collects a process's output for the failure report.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs `projector run` for this world with extra flags and
// environment (KEY=VALUE).
func (w *world) start(extraEnv []string, extra ...string) *proc {
	w.t.Helper()
	addr := freeAddr(w.t)
	args := append(w.runArgs(addr), extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	p := &proc{t: w.t, cmd: cmd, addr: addr, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	w.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if w.t.Failed() {
			w.t.Logf("projector output (%s):\n%s", addr, tail(p.log.String(), 80))
		}
	})
	return p
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// stop sends SIGTERM and requires a clean exit (status 0) within 30 s. It
// first waits until the process serves /healthz: a SIGTERM that arrives
// before the runtime installed its handler ends any Go process at once.
func (p *proc) stop() {
	p.t.Helper()
	p.stopAfter(0)
}

// stopAfter is stop with the SIGTERM sent d after /healthz first answers,
// to stop the service at a chosen moment of its start.
func (p *proc) stopAfter(d time.Duration) {
	p.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := p.get("/healthz"); code == http.StatusOK || p.exited() {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("projector never served /healthz")
		}
	}
	time.Sleep(d)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("projector did not exit within 30 s of SIGTERM")
	}
	if p.err != nil {
		p.t.Fatalf("projector exited with %v after SIGTERM, want status 0", p.err)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// metrics scrapes the process's /metrics and returns each sample by its
// name and labels, e.g. `projector_records_total{outcome="projected"}`.
func (p *proc) metrics() map[string]float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		p.t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	return parseMetrics(p.t, resp.Body)
}

func parseMetrics(t *testing.T, r io.Reader) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// get fetches a path of the process's HTTP server.
func (p *proc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// publishFile publishes JSON lines with `projector publish`.
func (w *world) publishFile(lines []string) {
	w.t.Helper()
	path := filepath.Join(w.t.TempDir(), "docs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		w.t.Fatal(err)
	}
	out, err := exec.Command(bin, "publish", "--brokers", w.brokers, "--topic", w.topic, "--file", path).CombinedOutput()
	if err != nil {
		w.t.Fatalf("projector publish: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("published %d records", len(lines)); !strings.Contains(string(out), want) {
		w.t.Fatalf("projector publish said %q, want %q", out, want)
	}
}

// produce writes records to the world's topic directly.
func (w *world) produce(recs ...*kgo.Record) {
	w.t.Helper()
	for _, r := range recs {
		r.Topic = w.topic
	}
	if err := w.kcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		w.t.Fatalf("produce: %v", err)
	}
}

// produceTo writes records to one partition of the world's topic.
func (w *world) produceTo(partition int32, recs ...*kgo.Record) {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		w.t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range recs {
		r.Topic, r.Partition = w.topic, partition
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		w.t.Fatalf("produce to partition %d: %v", partition, err)
	}
}

// waitDrained waits until the group's committed offsets reach the end of
// every partition, failing if p exits first or time runs out.
func (w *world) waitDrained(p *proc, timeout time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lag, err := w.lag()
		if err == nil && lag == 0 {
			return
		}
		if p != nil && p.exited() {
			w.t.Fatalf("projector exited before the topic was drained (lag %d, %v): %v", lag, err, p.err)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("topic not drained within %s: lag %d, %v", timeout, lag, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lag is the sum over partitions of end offset minus committed offset.
func (w *world) lag() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		return -1, err
	}
	committed, err := w.adm.FetchOffsets(ctx, w.group)
	if err != nil {
		return -1, err
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		at := int64(0)
		if ok {
			at = c.At
		}
		lag += o.Offset - at
	})
	return lag, nil
}

// committedEqualsEnd requires the committed offsets to equal the end offsets.
func (w *world) committedEqualsEnd() {
	w.t.Helper()
	ctx := context.Background()
	ends, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		w.t.Fatal(err)
	}
	committed, err := w.adm.FetchOffsets(ctx, w.group)
	if err != nil {
		w.t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, _ := committed.Lookup(o.Topic, o.Partition)
		if c.At != o.Offset {
			w.t.Errorf("partition %d: committed offset %d, end offset %d; want equal", o.Partition, c.At, o.Offset)
		}
	})
}

// deadLetters reads every record of the dead-letter topic.
func (w *world) deadLetters() []*kgo.Record {
	w.t.Helper()
	return w.readTopic(w.dlqTopic)
}

// records returns every record of the world's document topic.
func (w *world) records() []*kgo.Record {
	w.t.Helper()
	return w.readTopic(w.topic)
}

// readTopic returns every record of topic, from the start to its end now.
func (w *world) readTopic(topic string) []*kgo.Record {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := w.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		w.t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			want += o.Offset
		}
	})
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(w.brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		w.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			w.t.Fatalf("read %d of %d records of %s: %v", len(out), want, topic, ctx.Err())
		}
		out = append(out, f.Records()...)
	}
	return out
}

// header returns a record header's value.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// scanLines splits output into lines.
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
