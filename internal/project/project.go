package project

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fence"
	"github.com/projector/projector/internal/health"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/retry"
)

// Store labels, used in metrics, logs, errors and the health status.
const (
	StoreIndex      = "index"
	StoreGraph      = "graph"
	StoreRelational = "relational"
)

// DeadLetter is a record that can never be projected, with the reason.
type DeadLetter struct {
	Record *kgo.Record
	// TopicID is the id of Record's topic (zero when the broker did not
	// say), so that a redrive reading the record again at its offset can
	// tell the topic from one created again under its name.
	TopicID TopicID
	Reason  event.Reason
	Detail  string
}

// DeadLetters writes records to the dead-letter topic. Send returns only
// when every letter is acknowledged, or with an error; a *PermanentError
// (the topic refuses a letter for good) halts the partition instead of
// being retried.
type DeadLetters interface {
	Send(ctx context.Context, letters []DeadLetter) error
}

// Fencer checks that the stores hold what a batch wrote.
type Fencer interface {
	Check(ctx context.Context, want map[string][]uuid.UUID) ([]fence.Mismatch, error)
}

// FencePolicy decides what happens when a document still does not match
// after its re-projections.
type FencePolicy string

const (
	// FenceDLQ sends the document's records of the batch to the dead-letter
	// topic with reason fence_mismatch and goes on. The default: one
	// document a store will not hold must not stop a whole partition, and
	// the record stays recoverable from the dead-letter topic.
	FenceDLQ FencePolicy = "dlq"
	// FenceHalt stops the partition: nothing more is committed on it and
	// the service reports not ready until an operator steps in.
	FenceHalt FencePolicy = "halt"
)

// HaltReason says why a partition halted; it is the reason label of
// projector_partition_halts_total.
type HaltReason string

// The reasons a partition halts.
const (
	// HaltFenceMismatch: a fence mismatch persists under FenceHalt.
	HaltFenceMismatch HaltReason = "fence_mismatch"
	// HaltDeadLetterRefused: the dead-letter topic refuses a letter
	// permanently, so the record can neither be projected nor put aside.
	HaltDeadLetterRefused HaltReason = "dead_letter_refused"
	// HaltHandleError: Handle failed in a way its own retries could not get
	// past (a store rejected a read of the states, say).
	HaltHandleError HaltReason = "handle_error"
	// HaltFenced: a store refused the batch because the partition has a
	// newer writer (a *FencedError): this member lost the partition, or
	// another deployment writes it too.
	HaltFenced HaltReason = "fenced"
)

// HaltReasons lists every halt reason, so metrics can show each at zero.
func HaltReasons() []HaltReason {
	return []HaltReason{HaltFenceMismatch, HaltDeadLetterRefused, HaltHandleError, HaltFenced}
}

// ReasonOf is the reason err halts a partition: a HaltError's own, else
// HaltHandleError.
func ReasonOf(err error) HaltReason {
	if h, ok := errors.AsType[*HaltError](err); ok {
		return h.Reason
	}
	return HaltHandleError
}

// HaltError stops a partition: nothing more is committed on it until an
// operator fixes the cause and restarts the service.
type HaltError struct {
	Reason HaltReason
	// Mismatches are the documents that still differ, for HaltFenceMismatch.
	Mismatches []fence.Mismatch
	// Err is the failure, for the other reasons.
	Err error
}

func (e *HaltError) Error() string {
	if e.Reason == HaltFenceMismatch && len(e.Mismatches) > 0 {
		return fmt.Sprintf("fence mismatch persists after re-projection (%s); halting the partition", e.Mismatches[0])
	}
	return fmt.Sprintf("%s: %v; halting the partition", e.Reason, e.Err)
}

// Unwrap returns the failure that halted the partition, if any.
func (e *HaltError) Unwrap() error { return e.Err }

// Config holds the projector's policies and bounds.
type Config struct {
	OnConflict      ConflictPolicy
	OnFenceMismatch FencePolicy
	// FenceRetries is how many times a mismatching document is re-projected
	// before OnFenceMismatch applies.
	FenceRetries int
	// MaxBatchChunks bounds the chunks of one store write; a larger batch
	// is written in several parts, each fenced before the next.
	MaxBatchChunks int
	// MaxBatchBytes bounds the same parts in bytes: the records' values
	// and the vectors of their chunks. A batch of large records is then
	// split rather than sent as one request, transaction or statement
	// that a store's limit refuses. A single larger record is a part of
	// its own.
	MaxBatchBytes int
	// Writer names this process in the ledger.
	Writer string
	// RetryMin and RetryMax bound the exponential backoff of store retries.
	RetryMin, RetryMax time.Duration
	// IndexWriteTimeout bounds how late an index write of this process can
	// land: each one follows a check that its token is still the
	// partition's newest (Relational.CheckFence) and must end within this
	// long of it, or it is given up and tried again after a new check. A
	// member that lost its partition without knowing it (frozen, cut off)
	// can therefore write the index for at most this long after the new
	// owner took its token; the new owner settles the index once that is
	// over (Settle, docs/write-order.md). Every member of a group must use
	// the same value.
	IndexWriteTimeout time.Duration
	// StoreCallTimeout bounds each attempt of a call to a store (a write,
	// a read of the states, a fence): an attempt that has not ended by
	// then is given up and tried again, so a connection that passes no
	// byte and resets nothing holds a partition for that long, not until
	// it is revoked.
	StoreCallTimeout time.Duration
	// Generation is the number of the index generation Deps.Index writes,
	// the member's live one: every chunk it writes is marked with it
	// (Chunk.Generation), its vectors being that generation's model's. 0:
	// no generation set.
	Generation int
}

// DefaultStoreCallTimeout is Config.StoreCallTimeout unless configured:
// PostgreSQL's statement_timeout of the writers' sessions, far above any
// batch's write on a store that answers.
const DefaultStoreCallTimeout = time.Minute

// DefaultIndexWriteTimeout is Config.IndexWriteTimeout unless configured:
// well above an index write of a full batch on a loaded server, well below
// a group's session timeout.
const DefaultIndexWriteTimeout = 10 * time.Second

// LateWindow is how long after a member took a partition from one that
// did not release it a late index write of that one may still land: its
// IndexWriteTimeout after its last token check, which came before the new
// owner's token, plus as much again for a request its server received
// just before the deadline and applies after it, and for clocks that run
// at slightly different rates. The owner settles the index then.
func LateWindow(indexWriteTimeout time.Duration) time.Duration { return 2 * indexWriteTimeout }

// Deps are the parts a Projector drives.
type Deps struct {
	Decoder     *event.Decoder
	Embedder    Embedder
	Index       Index
	Graph       Graph
	Relational  Relational
	Fences      Fencer
	DeadLetters DeadLetters
	Health      *health.Status
	// Tracer, when set, receives every record at each stage.
	Tracer Tracer
	// Settlement is what Settle reads of the relational store.
	Settlement Settlement
	// Generations, when set, are the index generations written beside
	// the live one (Index).
	Generations Generations
	// Faults, when set, is told each point between two store writes; the
	// crash tests use it to stop the process exactly there.
	Faults Faults
	// Clock measures the index writes' bound (nil: the system's); the
	// interleaving explorer passes the bound without waiting for it.
	Clock Clock
}

// Clock is the time of the index writes' bound.
type Clock interface {
	Now() time.Time
	// WithTimeout is context.WithTimeout on this clock.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// systemClock is the process's clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Stage is a step of an event's path, written to the trace topic.
type Stage string

// The stages an event is traced at.
const (
	StageReceived  Stage = "received"
	StageProjected Stage = "projected"
	StageFailed    Stage = "failed"
)

// TraceEvent describes one record at a stage.
type TraceEvent struct {
	IdempotencyKey string
	DocumentKey    string
	Version        int64
	Outcome        string
	Reason         string
	Topic          string
	Partition      int32
	Offset         int64
	CorrelationID  string
}

// Tracer records the path of events (the optional --trace-topic). It must
// not block: tracing never slows the projection down.
type Tracer interface {
	Trace(ctx context.Context, stage Stage, events []TraceEvent)
}

// Faults injects failures between the steps of a write (tests only).
type Faults interface {
	At(ctx context.Context, point string)
}

// Projector handles batches of one partition's records. Handle may be
// called concurrently for batches that share no document: batches of
// different partitions (documents never span partitions), and batches of
// one partition whose record keys differ (a document's key is its record's
// key). Each call reads and writes only its own documents' state, so
// concurrent calls are as independent as calls one after the other.
type Projector struct {
	cfg  Config
	log  *zap.Logger
	m    *metrics
	busy *busy
	d    Deps
}

// New returns a Projector; its metrics are registered on reg.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer, d Deps) *Projector {
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.MaxBatchChunks <= 0 {
		cfg.MaxBatchChunks = 4096
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.IndexWriteTimeout <= 0 {
		cfg.IndexWriteTimeout = DefaultIndexWriteTimeout
	}
	if cfg.StoreCallTimeout <= 0 {
		cfg.StoreCallTimeout = DefaultStoreCallTimeout
	}
	if d.Clock == nil {
		d.Clock = systemClock{}
	}
	return &Projector{cfg: cfg, log: log, m: newMetrics(reg), busy: newBusy(reg), d: d}
}

// Handle projects records, which are consecutive records of one partition
// in offset order, of the topic whose id is topicID (zero when the broker
// does not say), written under fence, the caller's claim on the partition.
// It returns nil when every record is done: written to all three stores and
// fenced, found stale, or acknowledged by the dead-letter topic; only then
// may the caller commit past them. Store failures are retried until they
// pass or ctx ends, so an error means the batch was abandoned (ctx ended)
// or the partition must halt (*HaltError; HaltFenced when a store refused
// the fence).
func (p *Projector) Handle(ctx context.Context, fence Fence, topicID TopicID, recs []*kgo.Record) error {
	start := time.Now()
	items := make([]item, len(recs))
	for i, r := range recs {
		items[i].rec, items[i].topicID = r, topicID
		items[i].pos = Position{Topic: r.Topic, TopicID: topicID, Partition: r.Partition, Offset: r.Offset}
		ev, err := p.d.Decoder.Decode(r.Key, r.Value, header(r, "correlation-id"))
		var bad *event.Error
		if errors.As(err, &bad) {
			items[i].bad = bad
			continue
		}
		items[i].ev = ev
		items[i].pos, items[i].bad = judgedAt(r, items[i].pos)
	}
	p.trace(ctx, StageReceived, items)
	vectorBytes := 0
	if p.d.Embedder != nil {
		vectorBytes = 4 * p.d.Embedder.Dim()
	}
	for _, part := range split(items, p.cfg.MaxBatchChunks, p.cfg.MaxBatchBytes, vectorBytes) {
		err := p.handle(ctx, fence, part)
		if fenced, ok := errors.AsType[*FencedError](err); ok {
			p.m.fenced.WithLabelValues(fenced.Store).Inc()
			return &HaltError{Reason: HaltFenced, Err: err}
		}
		if err != nil {
			return err
		}
	}
	p.m.batchRecords.Observe(float64(len(recs)))
	p.m.batchSeconds.Observe(time.Since(start).Seconds())
	return nil
}

// WaitRetry is how often a write a store asked to wait (a *WaitError) is
// tried again (or every Config.RetryMax, when that is shorter).
const WaitRetry = time.Second

// DefaultMaxBatchBytes is MaxBatchBytes unless configured: well below the
// request limits of the stores' servers (Qdrant's gRPC, Neo4j's and
// PostgreSQL's memory per transaction).
const DefaultMaxBatchBytes = 16 << 20

// split cuts items into consecutive parts of at most maxChunks chunks and
// maxBytes bytes, counting a record's value and vectorBytes per chunk (a
// single larger record stays alone in its part).
func split(items []item, maxChunks, maxBytes, vectorBytes int) [][]item {
	var parts [][]item
	begin, chunks, size := 0, 0, 0
	for i := range items {
		n := len(items[i].ev.Chunks)
		b := len(items[i].rec.Value) + n*vectorBytes
		if i > begin && (chunks+n > maxChunks || size+b > maxBytes) {
			parts = append(parts, items[begin:i])
			begin, chunks, size = i, 0, 0
		}
		chunks += n
		size += b
	}
	if begin < len(items) {
		parts = append(parts, items[begin:])
	}
	return parts
}

func (p *Projector) handle(ctx context.Context, fence Fence, items []item) error {
	var docKeys []string
	seen := map[string]bool{}
	for _, it := range items {
		if it.bad == nil && !seen[it.ev.Key] {
			seen[it.ev.Key] = true
			docKeys = append(docKeys, it.ev.Key)
		}
	}
	var states map[string]State
	if len(docKeys) > 0 {
		err := p.retry(ctx, StoreRelational, func(ctx context.Context) error {
			var err error
			states, err = p.d.Relational.States(ctx, fence, docKeys)
			return err
		})
		if err != nil {
			return err
		}
	}
	pl := fold(states, items, p.cfg.OnConflict, p.cfg.Writer)
	// The fold's letters (bad input, version conflicts) leave before any
	// store is written: once a later event of the batch is in the
	// relational store, a conflict read again is stale, and a letter still
	// owed after a crash there would never be sent.
	if err := p.sendLetters(ctx, pl.letters); err != nil {
		return err
	}
	w, err := p.buildWrite(ctx, pl)
	if KindOf(err) == Rejected && ctx.Err() == nil {
		// The embedder refused a text: only its record is dead-lettered.
		return p.isolate(ctx, fence, items, err)
	}
	if err != nil {
		return err
	}
	w.Fence = fence
	if !w.Empty() {
		// A batch that fails here writes nothing more: a fenced writer no
		// longer owns the stores, and a cut-short one may not. What it left
		// in the index is settled by the partition's owner.
		err := p.applyGenerations(ctx, w, pl.ledger)
		if KindOf(err) == Rejected && ctx.Err() == nil {
			return p.isolate(ctx, fence, items, err)
		}
		if err != nil {
			return err
		}
		letters, err := p.fence(ctx, w, items)
		if err != nil {
			return err
		}
		if err := p.sendLetters(ctx, letters); err != nil {
			return err
		}
	}
	p.record(ctx, items)
	return nil
}

// isolate handles the records of a batch a store rejected one at a time, so
// that only the record the store refuses goes to the dead-letter topic.
func (p *Projector) isolate(ctx context.Context, fence Fence, items []item, cause error) error {
	if len(items) > 1 {
		p.log.Warn("a store rejected a batch; retrying its records one by one", zap.Int("records", len(items)), zap.Error(cause))
		for i := range items {
			if it := &items[i]; it.outcome == OutcomeDLQ || it.reason == ReasonVersionConflict {
				// Its letter left before the stores were written.
				p.record(ctx, items[i:i+1])
				continue
			}
			if err := p.handle(ctx, fence, items[i:i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	it := &items[0]
	it.outcome, it.reason = OutcomeDLQ, ReasonStoreRejected
	p.log.Error("a store rejected a record; sending it to the dead-letter topic (the index and graph may hold parts of it until reconcile --repair)",
		append(recordFields(it), zap.Error(cause))...)
	if err := p.sendLetters(ctx, []DeadLetter{it.letter(ReasonStoreRejected, cause.Error())}); err != nil {
		return err
	}
	p.record(ctx, items)
	return nil
}

// buildWrite turns the folded batch into the stores' write, computing the
// vectors that events did not carry.
func (p *Projector) buildWrite(ctx context.Context, pl *plan) (*Write, error) {
	w := &Write{}
	needVectors := false
	for _, key := range pl.order {
		st := pl.docs[key]
		if st.Withdrawn {
			w.Withdrawn = append(w.Withdrawn, Withdrawal{Key: key, Version: st.Version, Position: st.Position})
			continue
		}
		doc := NewDocument(st.live, st.Position)
		for i := range doc.Chunks {
			needVectors = needVectors || doc.Chunks[i].Vector == nil
			doc.Chunks[i].Generation = p.cfg.Generation
		}
		w.Live = append(w.Live, doc)
	}
	if !needVectors {
		return w, nil
	}
	start := time.Now()
	err := p.retry(ctx, "embedder", func(ctx context.Context) error { return FillVectors(ctx, p.d.Embedder, w.Live) })
	p.m.embedSeconds.Observe(time.Since(start).Seconds())
	return w, err
}

// apply writes w to the three stores in the fixed order, each retried until
// it succeeds: first every index generation of writes (the live one's
// first, w itself, then those beside it), each under its own bound, then
// the graph and the relational store. A later store is never written
// before an earlier one acknowledged: see docs/write-order.md.
func (p *Projector) apply(ctx context.Context, writes []indexed, ledger []LedgerEntry) error {
	w := writes[0].w
	// Records the documents for the settle while a late index write of an
	// earlier owner may still land over this one.
	w.Settle = p.d.Clock.Now().Before(w.Fence.LateUntil)
	steps := []struct {
		store string
		write func(context.Context) error
	}{
		{StoreIndex, func(ctx context.Context) error {
			for _, iw := range writes {
				err := p.writeIndex(ctx, w.Fence, func(ctx context.Context) error { return iw.index.Apply(ctx, iw.w) })
				if err != nil && iw.generation > 0 {
					return p.besideFailed(ctx, w.Epoch, iw.generation, err)
				}
				if err != nil {
					return p.primaryFailed(ctx, err)
				}
			}
			return nil
		}},
		{StoreGraph, func(ctx context.Context) error { return p.d.Graph.Apply(ctx, w) }},
		{StoreRelational, func(ctx context.Context) error { return p.d.Relational.Apply(ctx, w, ledger) }},
	}
	p.fault(ctx, "before-index")
	for _, s := range steps {
		err := p.retry(ctx, s.store, func(ctx context.Context) error {
			start := time.Now()
			if err := s.write(ctx); err != nil {
				return err
			}
			p.m.storeWrite.WithLabelValues(s.store).Observe(time.Since(start).Seconds())
			return nil
		})
		if err != nil {
			return err
		}
		p.fault(ctx, "after-"+s.store)
	}
	return nil
}

// writeIndex makes one attempt of an index write under its bound: only
// once the relational store says that f is still the partition's newest
// token, and only for IndexWriteTimeout from then, so that a member which
// lost the partition writes the index for at most that long after the new
// owner took its token (Config.IndexWriteTimeout). A write that runs out
// of time fails and is tried again, after a new check, by the caller's
// retry; a refused check is the index's refusal (a *FencedError), and the
// writer stops. Unfenced writes (token 0) are not bounded.
func (p *Projector) writeIndex(ctx context.Context, f Fence, write func(context.Context) error) error {
	if f.Token == 0 {
		return write(ctx)
	}
	// The bound starts before the check, so that a writer stopped
	// anywhere between the two (frozen, descheduled) cannot write later.
	ictx, cancel := p.d.Clock.WithTimeout(ctx, p.cfg.IndexWriteTimeout)
	defer cancel()
	err := p.d.Relational.CheckFence(ictx, f)
	if fenced, ok := errors.AsType[*FencedError](err); ok {
		refused := *fenced
		refused.Store = StoreIndex
		return &refused
	}
	if err == nil {
		p.fault(ictx, "index-checked")
		err = write(ictx)
	}
	if err != nil && ictx.Err() != nil && ctx.Err() == nil {
		return &StoreError{Store: StoreIndex, Kind: Transient, Err: fmt.Errorf("index write not done within %s of its token check (--index-write-timeout): %w", p.cfg.IndexWriteTimeout, err)}
	}
	return err
}

func (p *Projector) fault(ctx context.Context, point string) {
	if p.d.Faults != nil {
		p.d.Faults.At(ctx, point)
	}
}

// fence checks w against the stores, re-projects the documents that do not
// match, and applies the mismatch policy to those that still do not. It
// returns the dead letters the policy adds.
//
// A re-projection writes the index exactly (Write.Exact): what differs may
// be the points of a later event that a member which lost the partition,
// or one that died between its index and relational writes, left there,
// which an ordinary write, only moving forward, would keep. A document the
// relational store holds another event of than w wrote is left alone: a
// writer of another log (a document whose partition changed) wrote it
// since, and fences it.
func (p *Projector) fence(ctx context.Context, w *Write, items []item) ([]DeadLetter, error) {
	start := time.Now()
	defer func() { p.m.fenceSeconds.Observe(time.Since(start).Seconds()) }()
	for attempt := 0; ; attempt++ {
		var mismatches []fence.Mismatch
		err := p.retry(ctx, "fence", func(ctx context.Context) error {
			var err error
			mismatches, err = p.checkFences(ctx, w)
			return err
		})
		if err != nil || len(mismatches) == 0 {
			return nil, err
		}
		mismatches, err = p.dropSuperseded(ctx, w, mismatches)
		if err != nil || len(mismatches) == 0 {
			return nil, err
		}
		for _, m := range mismatches {
			p.log.Warn("fence mismatch", zap.String("store", m.Store), zap.String("document_key", m.Key),
				zap.Int("want", m.Want), zap.Int("got", m.Got), zap.Int("missing", len(m.Missing)),
				zap.Int("unexpected", len(m.Unexpected)), zap.Int("attempt", attempt))
		}
		bad := map[string]bool{}
		for _, m := range mismatches {
			bad[m.Key] = true
		}
		w = w.restrict(bad)
		if attempt >= p.cfg.FenceRetries {
			if p.cfg.OnFenceMismatch == FenceHalt {
				return nil, &HaltError{Reason: HaltFenceMismatch, Mismatches: mismatches}
			}
			var letters []DeadLetter
			for i := range items {
				it := &items[i]
				if it.bad == nil && it.reason == "" && bad[it.ev.Key] && it.outcome != OutcomeStale {
					it.outcome, it.reason = OutcomeDLQ, ReasonFenceMismatch
					letters = append(letters, it.letter(ReasonFenceMismatch,
						"after "+fmt.Sprint(attempt)+" re-projections: "+mismatchesOf(mismatches, it.ev.Key)))
				}
			}
			return letters, nil
		}
		// Re-project: the ledger rows are already committed, so only the
		// documents and chunks are written again.
		p.fault(ctx, "reproject")
		w.Exact = true
		if err := p.applyGenerations(ctx, w, nil); err != nil {
			return nil, err
		}
	}
}

// dropSuperseded takes out of mismatches the documents of w whose
// relational row holds another event than w wrote: w is not what they
// must show any more, and the writer of the event they hold fences it.
func (p *Projector) dropSuperseded(ctx context.Context, w *Write, mismatches []fence.Mismatch) ([]fence.Mismatch, error) {
	keys := make([]string, 0, len(mismatches))
	for _, m := range mismatches {
		if !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	var states map[string]State
	err := p.retry(ctx, StoreRelational, func(ctx context.Context) error {
		var err error
		states, err = p.d.Relational.States(ctx, w.Fence, keys)
		return err
	})
	if err != nil {
		return nil, err
	}
	superseded := map[string]bool{}
	for _, d := range w.Live {
		if st, ok := states[d.Key]; ok && (st.Withdrawn || st.Version != d.Version || st.ContentHash != d.ContentHash) {
			superseded[d.Key] = true
		}
	}
	for _, d := range w.Withdrawn {
		if st, ok := states[d.Key]; ok && (!st.Withdrawn || st.Version != d.Version) {
			superseded[d.Key] = true
		}
	}
	if len(superseded) == 0 {
		return mismatches, nil
	}
	p.log.Info("the relational store holds another event of these documents than this write: written since by another log's writer, which fences it",
		zap.Int("documents", len(superseded)))
	rest := mismatches[:0:0]
	for _, m := range mismatches {
		if !superseded[m.Key] {
			rest = append(rest, m)
		}
	}
	return rest, nil
}

func mismatchesOf(ms []fence.Mismatch, key string) string {
	var out string
	for _, m := range ms {
		if m.Key == key {
			if out != "" {
				out += "; "
			}
			out += m.String()
		}
	}
	return out
}

// restrict returns the part of w that concerns the given documents.
func (w *Write) restrict(keep map[string]bool) *Write {
	out := &Write{Fence: w.Fence}
	for _, d := range w.Live {
		if keep[d.Key] {
			out.Live = append(out.Live, d)
		}
	}
	for _, d := range w.Withdrawn {
		if keep[d.Key] {
			out.Withdrawn = append(out.Withdrawn, d)
		}
	}
	return out
}

func (p *Projector) sendLetters(ctx context.Context, letters []DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	err := p.retry(ctx, "dead-letter topic", func(ctx context.Context) error {
		return p.d.DeadLetters.Send(ctx, letters)
	})
	if _, ok := errors.AsType[*PermanentError](err); ok {
		// Retrying would stop the partition for ever without a word;
		// halting says why, on /readyz and in the metrics.
		return &HaltError{Reason: HaltDeadLetterRefused, Err: err}
	}
	if err != nil {
		return err
	}
	for _, l := range letters {
		p.m.deadLetters.WithLabelValues(string(l.Reason)).Inc()
	}
	return nil
}

// trace sends items to the tracer, if there is one.
func (p *Projector) trace(ctx context.Context, stage Stage, items []item) {
	if p.d.Tracer == nil {
		return
	}
	events := make([]TraceEvent, len(items))
	for i := range items {
		it := &items[i]
		e := TraceEvent{Outcome: string(it.outcome), Topic: it.rec.Topic, Partition: it.rec.Partition, Offset: it.rec.Offset}
		e.Reason = string(it.reason)
		if it.bad != nil {
			e.Reason = string(it.bad.Reason)
		} else {
			e.IdempotencyKey = keys.IdempotencyKey(it.ev.Key, it.ev.Version, it.ev.Op)
			e.DocumentKey, e.Version, e.CorrelationID = it.ev.Key, it.ev.Version, it.ev.CorrelationID
		}
		events[i] = e
	}
	p.d.Tracer.Trace(ctx, stage, events)
}

// record counts, logs and traces the outcome of every record of a handled
// batch.
func (p *Projector) record(ctx context.Context, items []item) {
	var projected, failed []item
	for i := range items {
		if items[i].outcome == OutcomeDLQ || items[i].reason != "" {
			failed = append(failed, items[i])
		} else {
			projected = append(projected, items[i])
		}
	}
	p.trace(ctx, StageProjected, projected)
	p.trace(ctx, StageFailed, failed)
	for i := range items {
		it := &items[i]
		p.m.records.WithLabelValues(string(it.outcome)).Inc()
		switch {
		case it.bad != nil:
			p.log.Warn("bad input sent to the dead-letter topic", append(recordFields(it),
				zap.String("reason", string(it.bad.Reason)), zap.String("detail", it.bad.Detail))...)
		case it.outcome == OutcomeConflict || (it.outcome == OutcomeDLQ && it.storedHash != ""):
			p.log.Warn("version conflict", append(recordFields(it),
				zap.String("stored_content_hash", it.storedHash), zap.String("content_hash", it.ev.ContentHash),
				zap.String("policy", string(p.cfg.OnConflict)))...)
		default:
			if ce := p.log.Check(zap.DebugLevel, "record handled"); ce != nil {
				ce.Write(append(recordFields(it), zap.String("outcome", string(it.outcome)))...)
			}
		}
	}
}

// recordFields are the fields of every log line about a record. They never
// include chunk text.
func recordFields(it *item) []zap.Field {
	fields := []zap.Field{
		zap.String("topic", it.rec.Topic), zap.Int32("partition", it.rec.Partition), zap.Int64("offset", it.rec.Offset),
	}
	if it.bad != nil {
		return fields
	}
	op := it.ev.Op
	return append(fields,
		zap.String("document_key", it.ev.Key), zap.Int64("version", it.ev.Version),
		zap.String("idempotency_key", keys.IdempotencyKey(it.ev.Key, it.ev.Version, op)),
		zap.String("correlation_id", it.ev.CorrelationID))
}

// retry runs op until it succeeds, ctx ends, or it fails with a Rejected or a
// permanent error. It logs one line when a component starts failing and one when it
// recovers, and reports the outage on the health status in between.
func (p *Projector) retry(ctx context.Context, component string, op func(context.Context) error) error {
	var failingSince, waitingSince time.Time
	for attempt := 0; ; attempt++ {
		err := p.attempt(ctx, component, op)
		if err == nil {
			if !failingSince.IsZero() && p.d.Health.Recover(component) {
				p.log.Info("recovered", zap.String("component", component), zap.Int("attempts", attempt+1), zap.Duration("outage", time.Since(failingSince)))
			}
			if !waitingSince.IsZero() {
				p.log.Info("no longer waiting", zap.String("component", component), zap.Duration("waited", time.Since(waitingSince)))
			}
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		if wait, ok := errors.AsType[*WaitError](err); ok {
			// Not a failure: the store is asked to wait (a repair runs).
			if waitingSince.IsZero() {
				waitingSince = time.Now()
				p.log.Info("waiting", zap.String("component", component), zap.String("reason", wait.Reason))
			}
			if retry.Sleep(ctx, min(WaitRetry, p.cfg.RetryMax)) != nil {
				return err
			}
			continue
		}
		if _, ok := errors.AsType[*FencedError](err); ok {
			// Another writer holds the partition: no retry can help.
			return err
		}
		if _, ok := errors.AsType[*GenerationsChangedError](err); ok {
			// Not a failure: the write goes again from its index step.
			return err
		}
		kind := KindOf(err)
		store, limit := StoreOf(err), LimitOf(err)
		if store != "" {
			p.m.storeErrors.WithLabelValues(store, kind.String()).Inc()
		}
		if kind == Limit {
			p.m.limitErrors.WithLabelValues(store, limit).Inc()
		}
		if _, ok := errors.AsType[*PermanentError](err); ok || kind == Rejected {
			return err
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		problem := kind.String() + " failure: " + err.Error()
		if kind == Limit {
			problem = "limit " + limit + " reached (a limit of the store, not of a record): " + err.Error()
		}
		slow := kind == Fatal || kind == Limit
		if p.d.Health.Fail(component, problem) {
			level := zap.WarnLevel
			if slow {
				level = zap.ErrorLevel
			}
			fields := []zap.Field{zap.String("component", component), zap.String("kind", kind.String()), zap.Error(err)}
			if kind == Limit {
				fields = append(fields, zap.String("limit", limit))
			}
			p.log.Log(level, "failing; retrying with backoff until it recovers", fields...)
		}
		policy := retry.Policy{Min: p.cfg.RetryMin, Max: p.cfg.RetryMax}
		delay := policy.Delay(attempt)
		if slow {
			delay = policy.Slow()
		}
		if retry.Sleep(ctx, delay) != nil {
			return err
		}
	}
}

// attempt runs op once; a store's, under StoreCallTimeout. One that runs
// out of it is transient: the retry tries again, on another connection
// when the drivers dropped the one that did not answer.
func (p *Projector) attempt(ctx context.Context, component string, op func(context.Context) error) error {
	if storesOf(component) == nil {
		return op(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.StoreCallTimeout)
	defer cancel()
	done := p.busy.begin(component)
	err := op(cctx)
	done()
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		if _, ok := errors.AsType[*StoreError](err); !ok {
			err = &StoreError{Store: component, Kind: Transient, Err: err}
		}
		return fmt.Errorf("not done within %s (--store-call-timeout): %w", p.cfg.StoreCallTimeout, err)
	}
	return err
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
