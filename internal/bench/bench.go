// Package bench measures the projector's throughput end to end, against
// the real Kafka broker and stores, next to two references measured in the
// same run on the same corpus: the raw-store ceiling (the same writes
// through the same adapters, without Kafka, fences or ledger) and a naive
// projector that writes one chunk at a time. The machine it runs on is
// shared and noisy, so what it reports are ratios within one run; absolute
// rates only describe that run. `projector bench` runs it, and
// docs/benchmarks.md records its figures.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/qdrant/go-client/qdrant"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/graph"
	"github.com/projector/projector/internal/store/index"
	"github.com/projector/projector/internal/store/postgres"
)

// Config sizes the benchmark.
type Config struct {
	// Documents is the number of distinct documents of the corpus; the
	// corpus adds their later versions and withdrawals.
	Documents int
	// Partitions lists the partition counts to measure, each with as many
	// writers in the ceiling and the naive projector.
	Partitions []int
	Seed       uint64
	// Runs repeats every measurement; the report gives medians.
	Runs int
	// SkipNaive leaves the naive projector out.
	SkipNaive bool
	// SkipCount leaves out the service with count fences.
	SkipCount bool
	// VariantArgs, when set, are `projector run` flags of a variant of the
	// service, measured with id fences right after the service itself in
	// every round, so that a setting is compared within one run.
	VariantArgs []string
	// NaiveChunks is the naive projector's sample, in chunks per
	// measurement: it is slow, so it writes a part of the corpus and is
	// compared per chunk.
	NaiveChunks int
	// BatchRecords and MaxBatchChunks are the service's --batch-records
	// and --max-batch-chunks; the ceiling cuts its writes the same way.
	BatchRecords   int
	MaxBatchChunks int
	// Dim is the vector dimension (--vector-dim).
	Dim int
	// Timeout bounds one measurement of the service.
	Timeout time.Duration
	// IndexSettle bounds the wait, after a measurement's last write, for
	// the index server to finish optimizing the measurement's collection
	// (its status green) before the servers' CPU is read: the optimizer's
	// work (the HNSW build, merges, vacuum) is then counted in the
	// measurement that caused it, not in the next one, which it would also
	// slow. Its time is not part of the measurement's. 0: no wait.
	IndexSettle time.Duration
	// Processes are the servers whose CPU each measurement reads, beside
	// the projector's (or the ceiling's writers').
	Processes []Process
	// CPUProfile, when set, is where the id-fence service of the first run
	// writes Go's CPU profile (run --cpu-profile), one file per partition
	// count: CPUProfile with ".<partitions>p" before its extension when
	// there are several.
	CPUProfile string
}

// Stores are the three adapters of one measurement, on its own Qdrant
// collection and PostgreSQL schema.
type Stores struct {
	Index      *index.Store
	Graph      *graph.Store
	Relational *postgres.Store
}

// Deps are the connections the benchmark uses.
type Deps struct {
	// Kafka are the connection options of the broker.
	Kafka []kgo.Opt
	// OpenStores opens the adapters on a collection and a schema, as the
	// service would with --qdrant-collection and --postgres-schema.
	OpenStores func(ctx context.Context, collection, schema string) (*Stores, error)
	// CloseStores closes what OpenStores opened.
	CloseStores func(ctx context.Context, s *Stores)
	// Neo4j is a driver of the graph's server, for the naive projector and
	// for removing each measurement's nodes; Neo4jDatabase names the
	// database ("" for the server's default).
	Neo4j         neo4j.DriverWithContext
	Neo4jDatabase string
	// Service starts `projector run`.
	Service Service
	// Progress receives a line per measurement as it ends.
	Progress io.Writer
	// Peer, when set, is measured in every round after the service.
	Peer PeerSink
}

// Run measures every partition count of cfg, cfg.Runs times, and returns
// the report. Every measurement gets its own topic, group, collection,
// schema and document keys, removed when it ends.
func Run(ctx context.Context, cfg Config, d Deps) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(slices.Clip(d.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	b := &bench{cfg: cfg, d: d, cl: cl, adm: kadm.NewClient(cl), id: strconv.FormatInt(time.Now().Unix()%1e8, 36)}
	c := Generate(cfg.Documents, cfg.Seed, "")
	rep := &Report{
		Documents: c.Documents, Events: len(c.Records), NewVersions: c.NewVersions, Withdrawals: c.Withdrawals,
		Chunks: c.Chunks, Seed: cfg.Seed, NaiveChunks: cfg.NaiveChunks,
	}
	for _, p := range cfg.Partitions {
		rep.Partitions = append(rep.Partitions, PartitionResult{Partitions: p})
	}
	for run := range cfg.Runs {
		for i, p := range cfg.Partitions {
			r, err := b.round(ctx, run, p)
			if err != nil {
				return nil, err
			}
			rep.Partitions[i].Rounds = append(rep.Partitions[i].Rounds, r)
		}
	}
	return rep, nil
}

// validate checks c and sets the default timeout.
func (c *Config) validate() error {
	switch {
	case c.Documents < 1:
		return fmt.Errorf("documents %d: want at least 1", c.Documents)
	case len(c.Partitions) == 0:
		return errors.New("no partition counts to measure")
	case c.Runs < 1:
		return fmt.Errorf("runs %d: want at least 1", c.Runs)
	case c.BatchRecords < 1 || c.MaxBatchChunks < 1:
		return errors.New("batch records and batch chunks must be at least 1")
	case !c.SkipNaive && c.NaiveChunks < 1:
		return fmt.Errorf("naive chunks %d: want at least 1", c.NaiveChunks)
	case c.Dim < 1:
		return fmt.Errorf("vector dimension %d: want at least 1", c.Dim)
	}
	for _, p := range c.Partitions {
		if p < 1 {
			return fmt.Errorf("partitions %d: want at least 1", p)
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	return nil
}

// bench runs the measurements of one Run, one after the other.
type bench struct {
	cfg Config
	d   Deps
	cl  *kgo.Client
	adm *kadm.Client
	// id makes this run's names unique.
	id string
}

// round measures one partition count once.
func (b *bench) round(ctx context.Context, run, p int) (Round, error) {
	var r Round
	var err error
	label := fmt.Sprintf("r%d_p%d", run+1, p)
	if r.Ceiling, err = b.ceiling(ctx, label+"_ceiling", p); err != nil {
		return r, fmt.Errorf("raw-store ceiling, %d partitions: %w", p, err)
	}
	b.progress(run, p, "raw-store ceiling", r.Ceiling)
	if !b.cfg.SkipCount {
		m, err := b.service(ctx, label+"_count", p, "count")
		if err != nil {
			return r, fmt.Errorf("end to end with count fences, %d partitions: %w", p, err)
		}
		r.Count = &m
		b.progress(run, p, "end-to-end, count fences", m)
	}
	var profile []string
	if b.cfg.CPUProfile != "" && run == 0 {
		profile = []string{"--cpu-profile", b.profilePath(p)}
	}
	if r.IDs, err = b.service(ctx, label+"_ids", p, "ids", profile...); err != nil {
		return r, fmt.Errorf("end to end with id fences, %d partitions: %w", p, err)
	}
	b.progress(run, p, "end-to-end, id fences", r.IDs)
	if len(b.cfg.VariantArgs) > 0 {
		m, err := b.service(ctx, label+"_variant", p, "ids", b.cfg.VariantArgs...)
		if err != nil {
			return r, fmt.Errorf("end to end with id fences and %q, %d partitions: %w", b.cfg.VariantArgs, p, err)
		}
		r.Variant = &m
		b.progress(run, p, "end-to-end, id fences, variant", m)
	}
	if !b.cfg.SkipNaive {
		m, err := b.naive(ctx, label+"_naive", p)
		if err != nil {
			return r, fmt.Errorf("naive projector, %d partitions: %w", p, err)
		}
		r.Naive = &m
		b.progress(run, p, "naive projector", m)
	}
	if b.d.Peer != nil {
		m, err := b.peer(ctx, label+"_peer", p)
		if err != nil {
			return r, fmt.Errorf("JDBC sink, %d partitions: %w", p, err)
		}
		r.Peer = &m
		b.progress(run, p, "JDBC sink, PostgreSQL only", m)
	}
	return r, nil
}

// profilePath is where the service measured with p partitions writes its
// CPU profile.
func (b *bench) profilePath(p int) string {
	if len(b.cfg.Partitions) == 1 {
		return b.cfg.CPUProfile
	}
	ext := filepath.Ext(b.cfg.CPUProfile)
	return fmt.Sprintf("%s.%dp%s", strings.TrimSuffix(b.cfg.CPUProfile, ext), p, ext)
}

func (b *bench) progress(run, p int, what string, m Measurement) {
	if b.d.Progress == nil {
		return
	}
	fmt.Fprintf(b.d.Progress, "run %d of %d, partitions %d, %s: %.0f documents/s, %.0f chunks/s in %.1f s\n",
		run+1, b.cfg.Runs, p, what, m.DocumentsPerSecond(), m.ChunksPerSecond(), m.Seconds)
}

// namespace is where one measurement writes.
type namespace struct {
	topic, group, collection, schema, prefix string
}

func (b *bench) namespace(label string) namespace {
	name := "bench_" + b.id + "_" + label
	return namespace{
		topic: "projector-bench." + name, group: "projector-bench." + name,
		collection: name, schema: name, prefix: name + "/",
	}
}

// setUp returns the namespace of a measurement that writes the stores
// itself, the corpus under its keys, and its stores, opened and prepared.
func (b *bench) setUp(ctx context.Context, label string) (namespace, *Corpus, *Stores, error) {
	ns := b.namespace(label)
	st, err := b.d.OpenStores(ctx, ns.collection, ns.schema)
	if err != nil {
		return ns, nil, nil, err
	}
	for _, migrate := range []func(context.Context) error{st.Index.Migrate, st.Graph.Migrate, st.Relational.Migrate} {
		if err := migrate(ctx); err != nil {
			b.cleanup(ns, st)
			return ns, nil, nil, err
		}
	}
	return ns, Generate(b.cfg.Documents, b.cfg.Seed, ns.prefix), st, nil
}

// cleanup removes everything of ns and closes st, opening the stores of ns
// when st is nil. It runs after a failed measurement too, so it reports
// nothing: what it cannot remove carries the run's unique name.
func (b *bench) cleanup(ns namespace, st *Stores) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, _ = b.adm.DeleteTopics(ctx, ns.topic, ns.topic+".dlq")
	_, _ = b.adm.DeleteGroup(ctx, ns.group)
	sess := b.d.Neo4j.NewSession(ctx, neo4j.SessionConfig{DatabaseName: b.d.Neo4jDatabase})
	// CALL ... IN TRANSACTIONS needs an auto-commit transaction.
	if res, err := sess.Run(ctx, `
MATCH (n) WHERE (n:Document AND n.key STARTS WITH $p) OR (n:Chunk AND n.document_key STARTS WITH $p)
	OR (n:WithdrawnDocument AND n.key STARTS WITH $p) OR (n:PartitionWriter AND n.topic = $t)
CALL { WITH n DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS`, map[string]any{"p": ns.prefix, "t": ns.topic}); err == nil {
		_, _ = res.Consume(ctx)
	}
	_ = sess.Close(ctx)
	if st == nil {
		var err error
		if st, err = b.d.OpenStores(ctx, ns.collection, ns.schema); err != nil {
			return
		}
	}
	_ = index.DropCollections(ctx, st.Index.Client(), ns.collection)
	_, _ = st.Relational.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{ns.schema}.Sanitize()+" CASCADE")
	b.d.CloseStores(ctx, st)
}

// verify checks that the relational store holds the corpus's final state,
// so a measurement that lost writes cannot pass as a fast one.
func verify(ctx context.Context, st *Stores, c *Corpus) error {
	wantDocs, wantChunks := finalState(c.Records)
	var docs, chunks int
	err := st.Relational.Pool().QueryRow(ctx,
		`SELECT (SELECT count(*) FROM documents WHERE status = 'live'), (SELECT count(*) FROM chunks)`).Scan(&docs, &chunks)
	if err != nil {
		return fmt.Errorf("count the stored documents: %w", err)
	}
	if docs != wantDocs || chunks != wantChunks {
		return fmt.Errorf("the relational store holds %d live documents and %d chunks, want %d and %d", docs, chunks, wantDocs, wantChunks)
	}
	return nil
}

// ceiling writes the corpus's batches straight to the stores through the
// adapters, one writer per partition: the rate the stores allow the
// projector's writes, without Kafka, decoding, embedding, fences or ledger.
func (b *bench) ceiling(ctx context.Context, label string, partitions int) (Measurement, error) {
	ns, c, st, err := b.setUp(ctx, label)
	if err != nil {
		return Measurement{}, err
	}
	defer b.cleanup(ns, st)
	wr := newWriter(b.cfg.Dim)
	writes := make([][]*project.Write, partitions)
	for i, recs := range byPartition(c.Records, partitions) {
		if writes[i], err = wr.batches(recs, b.cfg.BatchRecords, b.cfg.MaxBatchChunks); err != nil {
			return Measurement{}, err
		}
	}
	var (
		mu    sync.Mutex
		spent [3]time.Duration
	)
	self := map[string]int{"ceiling writers": os.Getpid()}
	cpuBefore := sampleCPU(b.cfg.Processes, self)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, ws := range writes {
		g.Go(func() error {
			var mine [3]time.Duration
			for _, w := range ws {
				steps := []func() error{
					func() error { return st.Index.Apply(gctx, w) },
					func() error { return st.Graph.Apply(gctx, w) },
					func() error { return st.Relational.Apply(gctx, w, nil) },
				}
				for i, step := range steps {
					t := time.Now()
					if err := step(); err != nil {
						return err
					}
					mine[i] += time.Since(t)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range spent {
				spent[i] += mine[i]
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Measurement{}, err
	}
	elapsed := time.Since(start)
	settle, err := b.settleIndex(ctx, st, ns.collection)
	if err != nil {
		return Measurement{}, err
	}
	cpu := sampleCPU(b.cfg.Processes, self).since(cpuBefore)
	if err := verify(ctx, st, c); err != nil {
		return Measurement{}, err
	}
	total := (spent[0] + spent[1] + spent[2]).Seconds()
	return Measurement{
		Events: float64(len(c.Records)), Chunks: c.Chunks, Seconds: elapsed.Seconds(),
		Shares: Shares{Index: spent[0].Seconds() / total, Graph: spent[1].Seconds() / total, Relational: spent[2].Seconds() / total},
		CPU:    cpu, Settle: settle.Seconds(),
	}, nil
}

// service publishes the corpus to a fresh topic and measures `projector
// run` draining it, from the moment it is ready (stores prepared, group
// joined) until the group's committed offsets reach the end of the topic.
// extra are further flags of run, after the benchmark's own.
func (b *bench) service(ctx context.Context, label string, partitions int, fence string, extra ...string) (Measurement, error) {
	ns := b.namespace(label)
	c := Generate(b.cfg.Documents, b.cfg.Seed, ns.prefix)
	var st *Stores
	defer func() { b.cleanup(ns, st) }()
	if err := b.publish(ctx, ns.topic, partitions, c); err != nil {
		return Measurement{}, err
	}
	proc, err := b.d.Service.start(append([]string{
		"--topic", ns.topic, "--group", ns.group, "--dlq-topic", ns.topic + ".dlq",
		"--qdrant-collection", ns.collection, "--postgres-schema", ns.schema, "--fence", fence,
		"--batch-records", strconv.Itoa(b.cfg.BatchRecords), "--max-batch-chunks", strconv.Itoa(b.cfg.MaxBatchChunks),
		"--log-level", "warn",
	}, extra...))
	if err != nil {
		return Measurement{}, err
	}
	defer func() { _ = proc.stop() }()
	if err := proc.waitReady(ctx, 2*time.Minute); err != nil {
		return Measurement{}, err
	}
	pids := map[string]int{"projector": proc.cmd.Process.Pid}
	cpuBefore := sampleCPU(b.cfg.Processes, pids)
	start := time.Now()
	for {
		n, err := lag(ctx, b.adm, ns.topic, ns.group)
		if err == nil && n == 0 {
			break
		}
		if err := proc.exited(); err != nil {
			return Measurement{}, err
		}
		if time.Since(start) > b.cfg.Timeout {
			return Measurement{}, fmt.Errorf("not drained within %s (lag %d, %v)", b.cfg.Timeout, n, err)
		}
		select {
		case <-ctx.Done():
			return Measurement{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	if st, err = b.d.OpenStores(ctx, ns.collection, ns.schema); err != nil {
		return Measurement{}, err
	}
	settle, err := b.settleIndex(ctx, st, ns.collection)
	if err != nil {
		return Measurement{}, err
	}
	cpu := sampleCPU(b.cfg.Processes, pids).since(cpuBefore)
	metrics, err := proc.metrics(ctx)
	if err != nil {
		return Measurement{}, err
	}
	peak, err := proc.peakRSS()
	if err != nil {
		return Measurement{}, err
	}
	if err := proc.stop(); err != nil {
		return Measurement{}, err
	}
	if err := checkOutcomes(metrics, len(c.Records)); err != nil {
		return Measurement{}, err
	}
	if err := verify(ctx, st, c); err != nil {
		return Measurement{}, err
	}
	batch := metrics["projector_batch_seconds_sum"]
	share := func(name string) float64 { return metrics[name] / batch }
	return Measurement{
		Events: float64(len(c.Records)), Chunks: c.Chunks, Seconds: elapsed.Seconds(),
		Shares: Shares{
			Index:      share(`projector_store_write_seconds_sum{store="index"}`),
			Graph:      share(`projector_store_write_seconds_sum{store="graph"}`),
			Relational: share(`projector_store_write_seconds_sum{store="relational"}`),
			Fence:      share("projector_fence_seconds_sum"),
			Embed:      share("projector_embed_seconds_sum"),
		},
		PeakRSS:      peak,
		BatchRecords: metrics["projector_batch_records_sum"] / metrics["projector_batch_records_count"],
		CPU:          cpu,
		Settle:       settle.Seconds(),
		Idle:         idle(metrics, elapsed),
	}, nil
}

// settleIndex waits, within Config.IndexSettle, until the index server
// reports the collection optimized: green, and still green settleSteady
// later. The server reads yellow (or grey) as soon as its optimizers would
// work on a segment; qdrant-engine reads green until its optimizer thread,
// which passes every 200 ms, starts on the collection, so a single green
// right after the last write can come before the HNSW build. Between
// measurements nothing else keeps that thread busy. It returns how long it
// waited.
func (b *bench) settleIndex(ctx context.Context, st *Stores, collection string) (time.Duration, error) {
	if b.cfg.IndexSettle <= 0 {
		return 0, nil
	}
	start := time.Now()
	var greenSince time.Time
	for {
		info, err := st.Index.Client().GetCollectionInfo(ctx, collection)
		if err != nil {
			return 0, fmt.Errorf("read the optimizer's state of collection %s: %w", collection, err)
		}
		now := time.Now()
		switch status := info.GetStatus(); {
		case status != qdrant.CollectionStatus_Green:
			greenSince = time.Time{}
			if now.Sub(start) > b.cfg.IndexSettle {
				return 0, fmt.Errorf("collection %s is still %s %s after the last write (--index-settle %s)", collection, status, now.Sub(start).Round(time.Second), b.cfg.IndexSettle)
			}
		case greenSince.IsZero():
			greenSince = now
		case now.Sub(greenSince) >= settleSteady:
			return now.Sub(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// settleSteady is how long a collection must stay green to count as
// optimized: several passes of qdrant-engine's optimizer thread.
const settleSteady = time.Second

// idle is, per store, the share of the drain during which no call of the
// service to it was in flight (projector_store_busy_seconds_total). The
// drain is timed from the outside, so a share is within a poll of the
// committed offsets (50 ms).
func idle(metrics map[string]float64, elapsed time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, s := range []string{project.StoreIndex, project.StoreGraph, project.StoreRelational} {
		busy := metrics[`projector_store_busy_seconds_total{store="`+s+`"}`]
		out[s] = max(0, 1-busy/elapsed.Seconds())
	}
	return out
}

// checkOutcomes requires every record handled and none dead-lettered.
func checkOutcomes(metrics map[string]float64, records int) error {
	var handled, dlq float64
	for k, v := range metrics {
		if strings.HasPrefix(k, "projector_records_total{") {
			handled += v
		}
		if strings.HasPrefix(k, "projector_dlq_total{") {
			dlq += v
		}
	}
	if int(handled) != records || dlq != 0 {
		return fmt.Errorf("the service handled %.0f records and dead-lettered %.0f, want %d and 0", handled, dlq, records)
	}
	return nil
}

// publish creates topic and writes the corpus to it, each document to the
// partition Partition gives it.
func (b *bench) publish(ctx context.Context, topic string, partitions int, c *Corpus) error {
	resp, err := b.adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	const chunk = 1000
	for from := 0; from < len(c.Records); from += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for _, r := range c.Records[from:min(from+chunk, len(c.Records))] {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(Partition(r.Doc, partitions)), Key: []byte(r.Key), Value: r.Value})
		}
		if err := b.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("publish the corpus: %w", err)
		}
	}
	return nil
}

// naive writes a sample of the corpus's chunks one at a time, with one
// writer per partition, each over its partition's documents in order.
func (b *bench) naive(ctx context.Context, label string, partitions int) (Measurement, error) {
	ns, c, st, err := b.setUp(ctx, label)
	if err != nil {
		return Measurement{}, err
	}
	defer b.cleanup(ns, st)
	wr := newWriter(b.cfg.Dim)
	per := max(1, b.cfg.NaiveChunks/partitions)
	samples := make([][]project.Document, partitions)
	total := 0
	for i, recs := range byPartition(c.Records, partitions) {
		n := 0
		for _, r := range recs {
			if r.Withdraw || n >= per {
				continue
			}
			ev, err := wr.dec.Decode([]byte(r.Key), r.Value, "")
			if err != nil {
				return Measurement{}, fmt.Errorf("decode corpus record of %s: %w", r.Key, err)
			}
			d, err := wr.document(ev)
			if err != nil {
				return Measurement{}, err
			}
			d.Chunks = d.Chunks[:min(len(d.Chunks), per-n)]
			n += len(d.Chunks)
			samples[i] = append(samples[i], d)
		}
		total += n
	}
	nv := &naive{stores: st, driver: b.d.Neo4j, database: b.d.Neo4jDatabase}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for _, docs := range samples {
		g.Go(func() error {
			for i := range docs {
				for j := range docs[i].Chunks {
					if err := nv.write(gctx, &docs[i], &docs[i].Chunks[j]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Measurement{}, err
	}
	elapsed := time.Since(start)
	return Measurement{Events: float64(total) / c.ChunksPerEvent(), Chunks: total, Seconds: elapsed.Seconds(), PerChunk: true}, nil
}
