package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/admin"
	"github.com/projector/projector/internal/buildinfo"
	"github.com/projector/projector/internal/consume"
	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fault"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/httpserver"
	"github.com/projector/projector/internal/kafkametrics"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/trace"
)

// runFlags are the flags of `projector run`.
type runFlags struct {
	log    logFlags
	kafka  kafkaFlags
	stores storeFlags
	embed  embedderFlags

	topic           string
	group           string
	dlqTopic        string
	dlqRetention    time.Duration
	httpAddr        string
	pprof           bool
	cpuProfile      string
	instanceID      string
	fence           string
	fenceRetries    int
	onFenceMismatch string
	onConflict      string
	chunkBytes      int
	maxRecordBytes  int
	maxChunks       int
	maxPollRecords  int
	batchRecords    int
	inFlight        int
	maxBatchChunks  int
	maxBatchBytes   int
	fetchMaxBytes   int
	fetchPartBytes  int
	shutdownTimeout time.Duration
	sessionTimeout  time.Duration
	rebalance       time.Duration
	revokeTimeout   time.Duration
	groupInstanceID string
	retryMax        time.Duration
	indexWrite      time.Duration
	storeCall       time.Duration
	traceTopic      string
	migrate         bool
	livenessTimeout time.Duration
	adminAddr       string
	adminToken      secretFile
}

// adminTokenEnv holds the admin endpoint's bearer token when no file does.
const adminTokenEnv = "PROJECTOR_ADMIN_TOKEN"

func (f *runFlags) register(fs *flag.FlagSet) {
	f.log.register(fs)
	f.kafka.register(fs)
	f.stores.register(fs)
	f.embed.register(fs)
	fs.StringVar(&f.topic, "topic", "documents", "topic of the document events")
	fs.StringVar(&f.group, "group", "projector", "consumer group; run more processes in the same group to scale out, one writer per partition")
	fs.StringVar(&f.dlqTopic, "dlq-topic", "documents.dlq", "dead-letter topic for records that cannot be projected")
	fs.DurationVar(&f.dlqRetention, "dlq-retention", 0, "retention.ms of the dead-letter topic when run creates it (0: keep dead letters for ever, retention.ms=-1); an existing topic is left as it is, with a warning when it would delete dead letters within 30 days")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address of /metrics, /healthz and /readyz; loopback by default so nothing is exposed unless asked (containers set 0.0.0.0:8080)")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve /debug/pprof/ on --http-addr")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write Go's CPU profile of the whole run to this file when the process stops (projector bench --cpu-profile sets it)")
	fs.StringVar(&f.instanceID, "instance-id", "", "name of this process in the ledger and logs (default: host name and process id)")
	fs.StringVar(&f.fence, "fence", "ids", "fence after each batch: ids (exact chunk id sets per document), count (chunk counts per document) or off")
	fs.IntVar(&f.fenceRetries, "fence-retries", 2, "re-projections of a document whose fence does not match before --on-fence-mismatch applies")
	fs.StringVar(&f.onFenceMismatch, "on-fence-mismatch", string(project.FenceDLQ), "after the re-projections: dlq (dead-letter the record, go on) or halt (stop the partition, report not ready)")
	fs.StringVar(&f.onConflict, "on-conflict", string(project.ConflictDLQ), "same version, other content: dlq (keep the stored content, dead-letter the record) or overwrite")
	fs.IntVar(&f.chunkBytes, "chunk-bytes", event.DefaultChunkBytes, "largest chunk, in bytes, when the projector splits an event's text")
	fs.IntVar(&f.maxRecordBytes, "max-record-bytes", event.DefaultLimits().MaxRecordBytes, "largest record value accepted; larger ones are dead-lettered (too_large)")
	fs.IntVar(&f.maxChunks, "max-chunks", event.DefaultLimits().MaxChunks, "most chunks per document; more are dead-lettered (too_many_chunks)")
	fs.IntVar(&f.maxPollRecords, "max-poll-records", 2000, "records per poll across partitions; a poll's records are shared by the partitions that have some, so it should hold a few --batch-records")
	fs.IntVar(&f.batchRecords, "batch-records", 500, "records per batch; offsets are committed after each batch")
	fs.IntVar(&f.inFlight, "batches-in-flight", 2, "batches of one partition handled at once, committed in order; batches with a document key in common never overlap (1: one after the other)")
	fs.IntVar(&f.maxBatchChunks, "max-batch-chunks", 4096, "chunks per store write; a larger batch is written and fenced in parts")
	fs.IntVar(&f.maxBatchBytes, "max-batch-bytes", project.DefaultMaxBatchBytes, "bytes per store write (record values and chunk vectors); a larger batch is written and fenced in parts, a larger record alone")
	fs.IntVar(&f.fetchMaxBytes, "fetch-max-bytes", 16<<20, "bytes the Kafka client buffers per fetch; with --max-poll-records it bounds memory")
	fs.IntVar(&f.fetchPartBytes, "fetch-max-partition-bytes", 1<<20, "bytes of one partition per fetch; well below --fetch-max-bytes so each fetch feeds every partition's worker (compressed bytes: decompressed records take more)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", consume.DefaultShutdownTimeout, "time in-flight batches get to finish and the group to be left on SIGTERM before the batches are abandoned uncommitted; at most "+consume.MaxShutdownTimeout.String()+", so that the process exits within 10 s")
	fs.DurationVar(&f.sessionTimeout, "session-timeout", 45*time.Second, "how long the group waits for a silent member before moving its partitions (the broker bounds it, 6s..30m by default)")
	fs.DurationVar(&f.rebalance, "rebalance-timeout", 60*time.Second, "how long the group waits for its members to give up revoked partitions in a rebalance")
	fs.DurationVar(&f.livenessTimeout, "liveness-timeout", 5*time.Minute, "/livez fails when the poll loop has waited this long for records while the brokers say a partition it fetches has some (a wedged client; a slow store or a broker outage does not count)")
	fs.DurationVar(&f.revokeTimeout, "revoke-timeout", 20*time.Second, "time a revoked partition's in-flight batches get to finish and commit before they are cancelled uncommitted; must be below --rebalance-timeout")
	fs.StringVar(&f.groupInstanceID, "group-instance-id", "", "static group membership id (KIP-345): a restarted process with the same id gets its partitions back at once; one distinct id per process (e.g. the pod name of a StatefulSet)")
	fs.DurationVar(&f.retryMax, "retry-max", 30*time.Second, "longest wait between retries of a failing store")
	fs.DurationVar(&f.storeCall, "store-call-timeout", project.DefaultStoreCallTimeout, "longest time one call to a store (a batch's write, a read, a fence) may take before it is given up and tried again: a connection that passes nothing holds a partition no longer")
	fs.DurationVar(&f.indexWrite, "index-write-timeout", project.DefaultIndexWriteTimeout, "longest time an index write may take after its check of the partition's fencing token; the owner of a partition taken from a member that did not release it settles the index twice this long after (docs/write-order.md); the same on every member")
	fs.StringVar(&f.adminAddr, "admin-addr", "", "serve the admin endpoint (list partitions, resume a halted one) on this address, e.g. 127.0.0.1:8081; off when empty; anything but loopback needs --admin-token-file")
	f.adminToken.envVar = adminTokenEnv
	fs.Var(&f.adminToken, "admin-token-file", "file holding the bearer token the admin endpoint requires (or set "+adminTokenEnv+")")
	fs.BoolVar(&f.migrate, "migrate", true, "apply the PostgreSQL schema migrations this build lacks at start; false: refuse a schema that is not at this build's version (migrate with projector migrate first)")
	fs.StringVar(&f.traceTopic, "trace-topic", "", "when set, write a record per event and stage (received, projected, failed) to this topic, keyed by the idempotency key")
}

func runCommand(ctx context.Context, args []string, e env) error {
	var f runFlags
	fs := newFlagSet("run", "run [flags]", e)
	f.register(fs)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if err := f.checkLimits(); err != nil {
		return usageError(err)
	}
	if err := f.embed.resolve(fs, &f.stores.vectorDim, e.getenv); err != nil {
		return err
	}
	log, err := f.log.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	for _, w := range e.warnings {
		log.Warn(w)
	}
	return runService(ctx, &f, log, e.getenv)
}

// checkLimits refuses limits that would refuse every record or every
// write.
func (f *runFlags) checkLimits() error {
	for _, l := range []struct {
		flag       string
		value, min int
	}{
		{"--max-record-bytes", f.maxRecordBytes, 1},
		{"--max-chunks", f.maxChunks, 1},
		{"--max-batch-bytes", f.maxBatchBytes, 1},
		{"--batches-in-flight", f.inFlight, 1},
		{"--qdrant-upsert-max-bytes", f.stores.qdrantUpsertBytes, 64 << 10},
	} {
		if l.value < l.min {
			return fmt.Errorf("%s %d: want at least %d", l.flag, l.value, l.min)
		}
	}
	if f.dlqRetention < 0 {
		return fmt.Errorf("--dlq-retention %s: want 0 (keep) or more", f.dlqRetention)
	}
	return nil
}

func runService(ctx context.Context, f *runFlags, log *zap.Logger, getenv func(string) string) error {
	fenceMode, err := fence.ParseMode(f.fence)
	if err != nil {
		return usageError(err)
	}
	onConflict := project.ConflictPolicy(f.onConflict)
	if onConflict != project.ConflictDLQ && onConflict != project.ConflictOverwrite {
		return usageError(fmt.Errorf("--on-conflict %q: want dlq or overwrite", f.onConflict))
	}
	onMismatch := project.FencePolicy(f.onFenceMismatch)
	if onMismatch != project.FenceDLQ && onMismatch != project.FenceHalt {
		return usageError(fmt.Errorf("--on-fence-mismatch %q: want dlq or halt", f.onFenceMismatch))
	}
	if err := (consume.Config{RebalanceTimeout: f.rebalance, RevokeTimeout: f.revokeTimeout}).Check(); err != nil {
		return usageError(fmt.Errorf("--revoke-timeout, --rebalance-timeout: %w", err))
	}
	if err := (consume.Config{ShutdownTimeout: f.shutdownTimeout}).Check(); err != nil {
		return usageError(fmt.Errorf("--shutdown-timeout: %w", err))
	}
	if f.adminAddr != "" && !admin.Loopback(f.adminAddr) && f.adminToken.secret == "" {
		return usageError(fmt.Errorf("--admin-addr %s is reachable from other machines: give a token with --admin-token-file or %s, or listen on 127.0.0.1", f.adminAddr, adminTokenEnv))
	}
	if f.instanceID == "" {
		host, _ := os.Hostname()
		f.instanceID = host + "-" + strconv.Itoa(os.Getpid())
	}
	log = log.With(zap.String("instance", f.instanceID))

	faults, err := fault.FromEnv(getenv)
	if err != nil {
		return err
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				log.Warn("cannot write the CPU profile", zap.String("file", f.cpuProfile), zap.Error(err))
			}
		}()
	}

	build := buildinfo.Read()
	log.Info("projector build", zap.String("version", build.Version), zap.String("revision", build.Revision), zap.String("go", build.GoVersion))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildinfo.Register(reg, build)
	status := health.New()
	status.Register(reg)

	// The HTTP server starts first, so /healthz answers and /readyz says
	// why it is not ready while the stores are prepared.
	srv := httpserver.New(httpserver.Config{Addr: f.httpAddr, Pprof: f.pprof}, log.With(zap.String("component", "http")), reg, status)
	status.Fail("startup", "preparing the stores and the Kafka clients")
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error {
		return serve(gctx, f, log, reg, status, faults, fenceMode, onConflict, onMismatch)
	})
	err = g.Wait()
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Asked to stop while still starting (preparing a store, say):
		// that is a clean shutdown, not a failure.
		err = nil
	}
	log.Info("projector stopped")
	return err
}

// serve prepares the stores and Kafka clients and runs the consumer until
// ctx ends.
func serve(ctx context.Context, f *runFlags, log *zap.Logger, reg *prometheus.Registry, status *health.Status,
	faults *fault.Injector, fenceMode fence.Mode, onConflict project.ConflictPolicy, onMismatch project.FencePolicy) error {
	st, err := f.stores.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.close(context.WithoutCancel(ctx)); err != nil {
			log.Warn("stopping without waiting longer for a store to close", zap.Error(err))
		}
	}()
	if faults != nil {
		st.relational.InjectFaults(faults)
	}
	if err := st.migrate(ctx, log, f.migrate, f.embed.generation()); err != nil {
		return err
	}
	if err := st.generations.Check(f.embed.generation()); err != nil {
		return err
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "projector_graph_create_fallbacks_total",
		Help: "Graph transactions written again with MERGE only because a CREATE met an existing chunk (another writer of the graph).",
	}, func() float64 { return float64(st.graph.CreateFallbacks()) }))
	// The live generation is the member's primary one: its collection is
	// st.index, its vectors are those events carry and the relational
	// store keeps. The generations beside it get every write too, each
	// with its own embedder (project.Generations).
	live, _ := st.generations.Live()
	embedLog := log.With(zap.String("component", "embed"))
	embedder, err := f.embed.openGeneration(ctx, embedLog, reg, st.relational, live)
	if err != nil {
		return err
	}
	fences := fence.New(fenceMode, reg, st.index, st.graph, st.relational)
	generations, err := generation.NewTracker(ctx, st.relational, st.alias, live.Number, func(ctx context.Context, g generation.Generation) (project.Generation, error) {
		idx := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim)
		if err := idx.CheckCollection(ctx); err != nil {
			return project.Generation{}, err
		}
		// Its embedder's metrics are not exported: the live one's are.
		emb, err := f.embed.openGeneration(ctx, embedLog, prometheus.NewRegistry(), st.relational, g)
		if err != nil {
			return project.Generation{}, err
		}
		log.Info("writing an index generation beside the live one", zap.Int("generation", g.Number),
			zap.String("collection", g.Collection), zap.String("embedder", g.Embedder.String()))
		return project.Generation{Number: g.Number, Index: idx, Embedder: emb, Fences: fences.Of(idx)}, nil
	})
	if err != nil {
		return err
	}

	base, err := f.kafka.opts(log)
	if err != nil {
		return err
	}
	dlqLimit, err := prepareTopics(ctx, base, log, f)
	if err != nil {
		return err
	}
	// Each client gets its own kprom namespace: kprom registers per client.
	// Dead letters are compressed and batched up to what the dead-letter
	// topic accepts; a larger one goes alone through the second client,
	// whose batches may be as large as dlq.MaxLargeBytes uncompressed, so
	// the broker takes it if it compresses below the topic's limit.
	compress := kgo.ProducerBatchCompression(kgo.ZstdCompression(), kgo.Lz4Compression(), kgo.NoCompression())
	producer, err := kgo.NewClient(append(base, kgo.ClientID("projector-dlq"), compress,
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			if topic == f.dlqTopic {
				return int32(dlqLimit)
			}
			return dlq.DefaultMaxMessageBytes
		}),
		kgo.WithHooks(kafkametrics.Metrics("projector_kafka_dlq", reg)))...)
	if err != nil {
		return fmt.Errorf("kafka producer client: %w", err)
	}
	defer producer.Close()
	large, err := kgo.NewClient(append(base, kgo.ClientID("projector-dlq-large"), compress,
		kgo.ProducerBatchMaxBytes(dlq.MaxLargeBytes), kgo.ProducerLinger(0),
		kgo.WithHooks(kafkametrics.Metrics("projector_kafka_dlq_large", reg)))...)
	if err != nil {
		return fmt.Errorf("kafka producer client: %w", err)
	}
	defer large.Close()
	var tracer project.Tracer
	if f.traceTopic != "" {
		tracer = trace.New(producer, f.traceTopic, f.instanceID, log.With(zap.String("component", "trace")), reg)
	}

	// Vectors carried by events are the live generation's.
	dec := event.NewDecoder(event.Limits{MaxRecordBytes: f.maxRecordBytes, MaxChunks: f.maxChunks, VectorDim: live.Embedder.Dim},
		event.Splitter{MaxBytes: f.chunkBytes})
	proj := project.New(project.Config{
		OnConflict: onConflict, OnFenceMismatch: onMismatch, FenceRetries: f.fenceRetries,
		MaxBatchChunks: f.maxBatchChunks, MaxBatchBytes: f.maxBatchBytes, Writer: f.instanceID, RetryMax: f.retryMax,
		IndexWriteTimeout: f.indexWrite, StoreCallTimeout: f.storeCall, Generation: live.Number,
	}, log.With(zap.String("component", "project")), reg, project.Deps{
		Decoder:     dec,
		Embedder:    embedder,
		Index:       faults.WrapIndex(st.index),
		Graph:       st.graph,
		Relational:  st.relational,
		Settlement:  st.relational,
		Generations: generations,
		Fences:      fences,
		DeadLetters: dlq.New(producer, large, dlq.Config{Topic: f.dlqTopic, MaxMessageBytes: dlqLimit}, reg),
		Health:      status,
		Tracer:      tracer,
		Faults:      faults,
	})
	cons, err := consume.New(consume.Config{
		Topic: f.topic, Group: f.group, MaxPollRecords: f.maxPollRecords, BatchRecords: f.batchRecords, BatchesInFlight: f.inFlight,
		FetchMaxBytes: int32(f.fetchMaxBytes), FetchMaxPartitionBytes: int32(f.fetchPartBytes), ShutdownTimeout: f.shutdownTimeout,
		SessionTimeout: f.sessionTimeout, RebalanceTimeout: f.rebalance, RevokeTimeout: f.revokeTimeout, InstanceID: f.groupInstanceID,
		StallTimeout: f.livenessTimeout,
	}, log.With(zap.String("component", "consume")), reg, status, proj,
		project.NewFencing(st.relational, st.graph, f.instanceID, f.indexWrite, nil, faults), append(base, kgo.ClientID("projector"),
			kgo.WithHooks(kafkametrics.Metrics("projector_kafka", reg)))...)
	if err != nil {
		return err
	}
	log.Info("projector starting", zap.String("topic", f.topic), zap.String("group", f.group), zap.String("dlq_topic", f.dlqTopic),
		zap.String("fence", string(fenceMode)), zap.String("on_conflict", string(onConflict)), zap.String("on_fence_mismatch", string(onMismatch)))
	status.Recover("startup")
	g, gctx := errgroup.WithContext(ctx)
	status.SetLiveness(cons.Stalled)
	g.Go(func() error { return cons.Run(gctx) })
	if f.adminAddr != "" {
		srv := admin.New(admin.Config{Addr: f.adminAddr, Token: f.adminToken.secret}, log.With(zap.String("component", "admin")), cons)
		g.Go(func() error { return srv.Run(gctx) })
	}
	g.Go(func() error {
		return status.Watch(gctx, log.With(zap.String("component", "health")), 5*time.Second, st.index, st.graph, st.relational)
	})
	return g.Wait()
}

// startCPUProfile starts Go's CPU profile into path; stop ends it and
// closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// shortRetention is the retention below which an existing dead-letter
// topic is warned about: dead letters wait for a person, who may be away.
const shortRetention = 30 * 24 * time.Hour

// dlqHeadroom is what the dead-letter topic run creates accepts beyond
// --max-record-bytes: the dead-letter headers, and a record's own.
const dlqHeadroom = 64 << 10

// prepareTopics ensures the dead-letter topic through a short-lived admin
// client and returns the largest record it accepts (its max.message.bytes),
// which the dead-letter producer is then built with.
func prepareTopics(ctx context.Context, base []kgo.Opt, log *zap.Logger, f *runFlags) (int, error) {
	admin, err := kgo.NewClient(append(base, kgo.ClientID("projector-admin"))...)
	if err != nil {
		return 0, fmt.Errorf("kafka admin client: %w", err)
	}
	defer admin.Close()
	limit, err := ensureTopics(ctx, admin, log, topicPlan{
		topic: f.topic, dlqTopic: f.dlqTopic, dlqRetention: f.dlqRetention,
		dlqMaxMessageBytes: max(dlq.DefaultMaxMessageBytes, f.maxRecordBytes+dlqHeadroom),
	})
	if err == nil && limit < f.maxRecordBytes+dlqHeadroom {
		log.Warn("the dead-letter topic takes smaller records than --max-record-bytes accepts: the dead letter of a large record that does not compress below its max.message.bytes is cut (the whole record stays at its source offset)",
			zap.String("topic", f.dlqTopic), zap.Int("max_message_bytes", limit), zap.Int("max_record_bytes", f.maxRecordBytes))
	}
	return limit, err
}

// topicPlan is what ensureTopics checks and creates.
type topicPlan struct {
	topic, dlqTopic string
	// dlqRetention is the retention of a created dead-letter topic; 0
	// keeps dead letters for ever.
	dlqRetention time.Duration
	// dlqMaxMessageBytes is the max.message.bytes of a created one.
	dlqMaxMessageBytes int
}

// ensureTopics creates the dead-letter topic when it is missing, so the
// first bad record does not depend on broker auto-creation (often disabled
// in production) nor on its retention, and warns when the document topic
// does not exist yet or an existing dead-letter topic would delete dead
// letters soon. It returns the dead-letter topic's max.message.bytes. It is
// the service's first request to Kafka, so it waits, like the stores, while
// no broker answers.
func ensureTopics(ctx context.Context, cl *kgo.Client, log *zap.Logger, plan topicPlan) (int, error) {
	adm := kadm.NewClient(cl)
	var details kadm.TopicDetails
	brokers, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	err := waitUntil(ctx, log, "Kafka", func(ctx context.Context) error {
		var err error
		details, err = adm.ListTopics(ctx, plan.topic, plan.dlqTopic)
		return err
	}, kafkaUnreachable, zap.String("server", "Kafka"), zap.Strings("brokers", brokers))
	if err != nil {
		return 0, fmt.Errorf("list Kafka topics: %w", err)
	}
	if d, ok := details[plan.topic]; !ok || d.Err != nil {
		log.Warn("the document topic does not exist yet; waiting for it", zap.String("topic", plan.topic))
	}
	if d, ok := details[plan.dlqTopic]; !ok || d.Err != nil {
		retention := "-1"
		if plan.dlqRetention > 0 {
			retention = strconv.FormatInt(plan.dlqRetention.Milliseconds(), 10)
		}
		resp, err := adm.CreateTopic(ctx, -1, -1, map[string]*string{
			"retention.ms":      &retention,
			"max.message.bytes": kadm.StringPtr(strconv.Itoa(plan.dlqMaxMessageBytes)),
		}, plan.dlqTopic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
		case err != nil:
			return 0, fmt.Errorf("create dead-letter topic %s: %w", plan.dlqTopic, err)
		default:
			log.Info("created the dead-letter topic", zap.String("topic", plan.dlqTopic),
				zap.String("retention_ms", retention), zap.Int("max_message_bytes", plan.dlqMaxMessageBytes))
		}
	}
	return dlqLimits(ctx, adm, log, plan.dlqTopic)
}

// dlqLimits reads the dead-letter topic's max.message.bytes, and warns when
// its retention or cleanup policy would delete dead letters before anyone
// looks at them. A topic whose configuration cannot be read (a missing
// DescribeConfigs permission) is assumed to have Kafka's defaults.
func dlqLimits(ctx context.Context, adm *kadm.Client, log *zap.Logger, topic string) (int, error) {
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	var rc kadm.ResourceConfig
	if err == nil {
		rc, err = configs.On(topic, nil)
	}
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		log.Warn("cannot read the dead-letter topic's configuration; assuming Kafka's default max.message.bytes",
			zap.String("topic", topic), zap.Int("max_message_bytes", dlq.DefaultMaxMessageBytes), zap.Error(err))
		return dlq.DefaultMaxMessageBytes, nil
	}
	value := func(key string) string {
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value
			}
		}
		return ""
	}
	limit, err := strconv.Atoi(value("max.message.bytes"))
	if err != nil || limit <= 0 {
		limit = dlq.DefaultMaxMessageBytes
	}
	// A topic allowing more than the large producer sends is used up to
	// what it sends; one allowing less than the Kafka client's smallest
	// batch limit (512 bytes) refuses what it is sent, which halts the
	// partition with the broker's error.
	limit = max(min(limit, dlq.MaxLargeBytes), 1024)
	if ms, err := strconv.ParseInt(value("retention.ms"), 10, 64); err == nil && ms >= 0 && time.Duration(ms)*time.Millisecond < shortRetention {
		log.Warn("the dead-letter topic deletes dead letters within days; set its retention.ms to -1 (keep) or a long time",
			zap.String("topic", topic), zap.Int64("retention_ms", ms))
	}
	if b, err := strconv.ParseInt(value("retention.bytes"), 10, 64); err == nil && b >= 0 {
		log.Warn("the dead-letter topic deletes its oldest dead letters beyond retention.bytes; set it to -1",
			zap.String("topic", topic), zap.Int64("retention_bytes", b))
	}
	if strings.Contains(value("cleanup.policy"), "compact") {
		log.Warn("the dead-letter topic is compacted: a later dead letter of the same document deletes an earlier one; use cleanup.policy=delete",
			zap.String("topic", topic))
	}
	return limit, nil
}

// kafkaUnreachable reports whether a Kafka request failed because no broker
// answered (refused, reset, timed out) or the cluster is still starting:
// waiting heals those. A rejected credential, a TLS mismatch or a denied
// authorization never does, so the service stops at once and says which.
func kafkaUnreachable(err error) bool {
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return false // the broker hung up at once: SASL or TLS settings that do not match its listener
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Retriable
	}
	if op, ok := errors.AsType[*net.OpError](err); ok {
		return op.Op != "remote error" // a TLS alert from the broker, e.g. a rejected client certificate
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
