package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/projector/projector/internal/consume"
	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fault"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/httpserver"
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
	httpAddr        string
	pprof           bool
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
	maxBatchChunks  int
	fetchMaxBytes   int
	fetchPartBytes  int
	shutdownTimeout time.Duration
	sessionTimeout  time.Duration
	rebalance       time.Duration
	revokeTimeout   time.Duration
	groupInstanceID string
	retryMax        time.Duration
	traceTopic      string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.log.register(fs)
	f.kafka.register(fs)
	f.stores.register(fs)
	f.embed.register(fs)
	fs.StringVar(&f.topic, "topic", "documents", "topic of the document events")
	fs.StringVar(&f.group, "group", "projector", "consumer group; run more processes in the same group to scale out, one writer per partition")
	fs.StringVar(&f.dlqTopic, "dlq-topic", "documents.dlq", "dead-letter topic for records that cannot be projected")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address of /metrics, /healthz and /readyz; loopback by default so nothing is exposed unless asked (containers set 0.0.0.0:8080)")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve /debug/pprof/ on --http-addr")
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
	fs.IntVar(&f.maxBatchChunks, "max-batch-chunks", 4096, "chunks per store write; a larger batch is written and fenced in parts")
	fs.IntVar(&f.fetchMaxBytes, "fetch-max-bytes", 16<<20, "bytes the Kafka client buffers per fetch; with --max-poll-records it bounds memory")
	fs.IntVar(&f.fetchPartBytes, "fetch-max-partition-bytes", 1<<20, "bytes of one partition per fetch; well below --fetch-max-bytes so each fetch feeds every partition's worker (compressed bytes: decompressed records take more)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 25*time.Second, "time in-flight batches get to finish on SIGTERM before they are abandoned uncommitted")
	fs.DurationVar(&f.sessionTimeout, "session-timeout", 45*time.Second, "how long the group waits for a silent member before moving its partitions (the broker bounds it, 6s..30m by default)")
	fs.DurationVar(&f.rebalance, "rebalance-timeout", 60*time.Second, "how long the group waits for its members to give up revoked partitions in a rebalance")
	fs.DurationVar(&f.revokeTimeout, "revoke-timeout", 20*time.Second, "time a revoked partition's in-flight batch gets to finish and commit before it is cancelled uncommitted; must be below --rebalance-timeout")
	fs.StringVar(&f.groupInstanceID, "group-instance-id", "", "static group membership id (KIP-345): a restarted process with the same id gets its partitions back at once; one distinct id per process (e.g. the pod name of a StatefulSet)")
	fs.DurationVar(&f.retryMax, "retry-max", 30*time.Second, "longest wait between retries of a failing store")
	fs.StringVar(&f.traceTopic, "trace-topic", "", "when set, write a record per event and stage (received, projected, failed) to this topic, keyed by the idempotency key")
}

func runCommand(ctx context.Context, args []string, e env) error {
	var f runFlags
	fs := newFlagSet("run", "run [flags]", e)
	f.register(fs)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if err := f.embed.resolve(fs, &f.stores.vectorDim, e.getenv); err != nil {
		return err
	}
	log, err := f.log.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	return runService(ctx, &f, log, e.getenv)
}

func runService(ctx context.Context, f *runFlags, log *zap.Logger, getenv func(string) string) error {
	fenceMode, err := fence.ParseMode(f.fence)
	if err != nil {
		return err
	}
	onConflict := project.ConflictPolicy(f.onConflict)
	if onConflict != project.ConflictDLQ && onConflict != project.ConflictOverwrite {
		return fmt.Errorf("--on-conflict %q: want dlq or overwrite", f.onConflict)
	}
	onMismatch := project.FencePolicy(f.onFenceMismatch)
	if onMismatch != project.FenceDLQ && onMismatch != project.FenceHalt {
		return fmt.Errorf("--on-fence-mismatch %q: want dlq or halt", f.onFenceMismatch)
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
	defer st.close(context.WithoutCancel(ctx))
	if err := st.migrate(ctx, log); err != nil {
		return err
	}
	embedder, err := f.embed.open(ctx, log.With(zap.String("component", "embed")), reg, st.relational)
	if err != nil {
		return err
	}

	base, err := f.kafka.opts(log)
	if err != nil {
		return err
	}
	// Each client gets its own kprom namespace: kprom registers per client.
	producer, err := kgo.NewClient(append(base, kgo.ClientID("projector-dlq"),
		kgo.WithHooks(kprom.NewMetrics("projector_kafka_dlq", kprom.Registerer(reg))))...)
	if err != nil {
		return fmt.Errorf("kafka producer client: %w", err)
	}
	defer producer.Close()
	if err := ensureTopics(ctx, producer, log, f.topic, f.dlqTopic); err != nil {
		return err
	}
	var tracer project.Tracer
	if f.traceTopic != "" {
		tracer = trace.New(producer, f.traceTopic, f.instanceID, log.With(zap.String("component", "trace")), reg)
	}

	dec := event.NewDecoder(event.Limits{MaxRecordBytes: f.maxRecordBytes, MaxChunks: f.maxChunks, VectorDim: f.stores.vectorDim},
		event.Splitter{MaxBytes: f.chunkBytes})
	proj := project.New(project.Config{
		OnConflict: onConflict, OnFenceMismatch: onMismatch, FenceRetries: f.fenceRetries,
		MaxBatchChunks: f.maxBatchChunks, Writer: f.instanceID, RetryMax: f.retryMax,
	}, log.With(zap.String("component", "project")), reg, project.Deps{
		Decoder:     dec,
		Embedder:    embedder,
		Index:       faults.WrapIndex(st.index),
		Graph:       st.graph,
		Relational:  st.relational,
		Fences:      fence.New(fenceMode, reg, st.index, st.graph, st.relational),
		DeadLetters: dlq.New(producer, f.dlqTopic),
		Health:      status,
		Tracer:      tracer,
		Faults:      faults,
	})
	cons, err := consume.New(consume.Config{
		Topic: f.topic, Group: f.group, MaxPollRecords: f.maxPollRecords, BatchRecords: f.batchRecords,
		FetchMaxBytes: int32(f.fetchMaxBytes), FetchMaxPartitionBytes: int32(f.fetchPartBytes), ShutdownTimeout: f.shutdownTimeout,
		SessionTimeout: f.sessionTimeout, RebalanceTimeout: f.rebalance, RevokeTimeout: f.revokeTimeout, InstanceID: f.groupInstanceID,
	}, log.With(zap.String("component", "consume")), reg, status, proj, append(base, kgo.ClientID("projector"),
		kgo.WithHooks(kprom.NewMetrics("projector_kafka", kprom.Registerer(reg))))...)
	if err != nil {
		return err
	}
	log.Info("projector starting", zap.String("topic", f.topic), zap.String("group", f.group), zap.String("dlq_topic", f.dlqTopic),
		zap.String("fence", string(fenceMode)), zap.String("on_conflict", string(onConflict)), zap.String("on_fence_mismatch", string(onMismatch)))
	status.Recover("startup")
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return cons.Run(gctx) })
	g.Go(func() error {
		return status.Watch(gctx, log.With(zap.String("component", "health")), 5*time.Second, st.index, st.graph, st.relational)
	})
	return g.Wait()
}

// ensureTopics creates the dead-letter topic when it is missing, so the
// first bad record does not depend on broker auto-creation (often disabled
// in production), and warns when the document topic does not exist yet.
// It is the service's first request to Kafka, so it waits, like the stores,
// while no broker answers.
func ensureTopics(ctx context.Context, cl *kgo.Client, log *zap.Logger, topic, dlqTopic string) error {
	adm := kadm.NewClient(cl)
	var details kadm.TopicDetails
	brokers, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	err := waitUntil(ctx, log, "Kafka", func(ctx context.Context) error {
		var err error
		details, err = adm.ListTopics(ctx, topic, dlqTopic)
		return err
	}, kafkaUnreachable, zap.String("server", "Kafka"), zap.Strings("brokers", brokers))
	if err != nil {
		return fmt.Errorf("list Kafka topics: %w", err)
	}
	if d, ok := details[topic]; !ok || d.Err != nil {
		log.Warn("the document topic does not exist yet; waiting for it", zap.String("topic", topic))
	}
	if d, ok := details[dlqTopic]; ok && d.Err == nil {
		return nil
	}
	resp, err := adm.CreateTopic(ctx, -1, -1, nil, dlqTopic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create dead-letter topic %s: %w", dlqTopic, err)
	}
	log.Info("created the dead-letter topic", zap.String("topic", dlqTopic))
	return nil
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
