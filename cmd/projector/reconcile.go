package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/fault"
	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/replay"
	"github.com/projector/projector/internal/store/postgres"
)

// reconcileFlags are the flags of `projector reconcile`.
type reconcileFlags struct {
	log    logFlags
	kafka  kafkaFlags
	stores storeFlags
	embed  embedderFlags

	// The decoder's settings, which must be run's for an event read again
	// from the log to split into the same chunks.
	chunkBytes, maxRecordBytes, maxChunks int

	group            string
	keyPrefix        string
	since            string
	pageSize         int
	progressEvery    int
	jsonOutput       bool
	maxDiscrepancies int64
	failOnFindings   bool
	maxUnknown       int
	repair           bool
	deleteOrphans    bool
	generation       int
	leaseTTL         time.Duration
	metricsFile      string
	push             pushFlags
}

// maxPageSize bounds --page-size: a page is held in memory and sent to the
// stores as one list of keys.
const maxPageSize = 10000

func (f *reconcileFlags) register(fs *flag.FlagSet) {
	f.log.register(fs)
	f.kafka.register(fs)
	f.stores.register(fs)
	f.embed.register(fs)
	fs.IntVar(&f.chunkBytes, "chunk-bytes", event.DefaultChunkBytes, "run's --chunk-bytes: --repair splits an event read again from the log as run did")
	fs.IntVar(&f.maxRecordBytes, "max-record-bytes", event.DefaultLimits().MaxRecordBytes, "run's --max-record-bytes, for events read again from the log")
	fs.IntVar(&f.maxChunks, "max-chunks", event.DefaultLimits().MaxChunks, "run's --max-chunks, for events read again from the log")
	fs.StringVar(&f.group, "group", "projector", "consumer group of the projector; --repair and --delete-orphans say how many of its live members wait for the repair lease")
	fs.StringVar(&f.keyPrefix, "key-prefix", "", "only documents whose key starts with this prefix")
	fs.StringVar(&f.since, "since", "", "only documents updated at or after this RFC 3339 time (skips the scans for unknown documents)")
	fs.IntVar(&f.pageSize, "page-size", 1000, fmt.Sprintf("documents per page, 1 to %d; memory grows with it", maxPageSize))
	fs.IntVar(&f.progressEvery, "progress-every", 10000, "documents between progress lines on standard error")
	fs.BoolVar(&f.jsonOutput, "json", false, "print JSON lines (one object per discrepancy, then a summary object) instead of a table")
	fs.IntVar(&f.maxUnknown, "max-unknown", 100000, "unknown documents one store's scan reports before it stops, to bound memory (reported keys are remembered; --delete-orphans remembers none and has no bound)")
	fs.Int64Var(&f.maxDiscrepancies, "max-discrepancies", 0, "exit with status 3 when more discrepancies than this are left unresolved")
	fs.BoolVar(&f.failOnFindings, "fail-on-discrepancies", true, "exit with status 3 past --max-discrepancies; false: exit 0 once the report is written and pushed, for a scheduled job whose findings the alert ProjectorReconcileDiscrepancies reports (a failed Job would page beside it)")
	fs.BoolVar(&f.repair, "repair", false, "re-project missing, skewed and withdrawn-but-present documents from the relational copy, in the write order")
	fs.IntVar(&f.generation, "generation", 0, "the index generation whose collection is compared (0: the live one); only the live one can be repaired (projector generation status lists them)")
	fs.BoolVar(&f.deleteOrphans, "delete-orphans", false, "also remove orphans: re-project live documents holding foreign chunks, delete the chunks of unknown documents")
	fs.DurationVar(&f.leaseTTL, "repair-lease-ttl", 30*time.Second, "how long the repair lease of --repair and --delete-orphans outlives its last renewal (renewed every third of it): run's writes wait that long at most for a repair that died")
	fs.StringVar(&f.metricsFile, "metrics-file", "", "write the result as Prometheus text to this file (for node_exporter's textfile collector)")
	f.push.register(fs, "projector_reconcile")
}

func reconcileCommand(ctx context.Context, args []string, e env) error {
	var f reconcileFlags
	fs := newFlagSet("reconcile", "reconcile [flags]", e)
	f.register(fs)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	if err := f.embed.resolve(fs, &f.stores.vectorDim, e.getenv); err != nil {
		return err
	}
	cfg := reconcile.Config{Prefix: f.keyPrefix, PageSize: f.pageSize, Repair: f.repair, DeleteOrphans: f.deleteOrphans,
		ProgressEvery: f.progressEvery, MaxUnknown: f.maxUnknown}
	switch {
	case f.pageSize < 1 || f.pageSize > maxPageSize:
		return usageError(fmt.Errorf("--page-size %d: want 1 to %d", f.pageSize, maxPageSize))
	case f.maxUnknown < 1:
		return usageError(fmt.Errorf("--max-unknown %d: want at least 1", f.maxUnknown))
	case f.maxDiscrepancies < 0:
		return usageError(errors.New("--max-discrepancies must be >= 0"))
	case f.leaseTTL < minLeaseTTL:
		return usageError(fmt.Errorf("--repair-lease-ttl %s: want at least %s", f.leaseTTL, minLeaseTTL))
	case len(f.keyPrefix) > 512:
		return usageError(errors.New("--key-prefix is longer than a document key (512 bytes)"))
	}
	if f.since != "" {
		since, err := time.Parse(time.RFC3339Nano, f.since)
		if err != nil {
			return usageError(fmt.Errorf("--since %q: want an RFC 3339 time such as 2024-05-01T12:00:00Z", f.since))
		}
		cfg.Since = since
	}
	log, err := f.log.logger(e)
	if err != nil {
		return usageError(err)
	}
	defer func() { _ = log.Sync() }()
	// Stores nothing was projected to are not empty stores to compare: say
	// what is missing and what prepares them, before any report. The index
	// compared, and repaired, is the live generation's collection.
	st, err := f.stores.openLive(ctx)
	if err != nil {
		return err
	}
	defer st.close(context.WithoutCancel(ctx))
	var compared generation.Generation
	if len(st.generations) > 0 {
		g, err := st.generations.Reconciled(f.generation, f.repair || f.deleteOrphans)
		if err != nil {
			return usageError(err)
		}
		compared = g
		st.index = st.qdrant.ForCollection(g.Collection, g.Embedder.Dim)
	} else if f.generation != 0 {
		return usageError(fmt.Errorf("--generation %d: the registry has no generation (projector migrate registers the first)", f.generation))
	}
	if f.repair && len(st.generations) > 0 {
		// A repair from the log embeds as run does: with the live
		// generation's embedder.
		if err := st.generations.Check(f.embed.generation()); err != nil {
			return err
		}
	}
	if err := st.index.CheckCollection(ctx); err != nil {
		return fmt.Errorf("the index: %w", err)
	}
	faults, err := fault.FromEnv(e.getenv)
	if err != nil {
		return err
	}
	deps := reconcile.Deps{
		Decisions: st.relational,
		Source:    st.relational,
		Stores:    []reconcile.Store{st.index, st.graph, st.relational},
		Writes:    reconcile.WriteOrder{Index: st.index, Graph: st.graph, Relational: st.relational, Faults: faults},
		Faults:    faults,
	}
	if f.repair || f.deleteOrphans {
		lease, err := f.takeRepairLease(ctx, log, st, faults)
		if err != nil {
			return err
		}
		defer lease.Release(ctx)
		deps.Lease = lease
		if compared.Number > 0 {
			// The repair writes the live generation with its embedder,
			// whatever the flags say, and embeds again the chunk rows
			// whose vectors an earlier live generation's model made.
			emb, err := f.embed.openGeneration(ctx, log.With(zap.String("component", "embed")), prometheus.NewRegistry(), st.relational, compared)
			if err != nil {
				return err
			}
			deps.Writes.Embedder, deps.Writes.Generation = emb, compared.Number
		}
	}
	if f.repair {
		// What the relational copy lost, the log may still hold.
		kopts, err := f.kafka.opts(log)
		if err != nil {
			return usageError(err)
		}
		emb, dim := deps.Writes.Embedder, compared.Embedder.Dim
		if emb == nil { // no registry yet: the flags' embedder
			if emb, err = f.embed.open(ctx, log.With(zap.String("component", "embed")), prometheus.NewRegistry(), st.relational); err != nil {
				return err
			}
			dim = f.stores.vectorDim
		}
		deps.Log = &logSource{kafka: kopts, rel: st.relational, emb: emb, generation: compared.Number,
			dec: event.NewDecoder(event.Limits{MaxRecordBytes: f.maxRecordBytes, MaxChunks: f.maxChunks, VectorDim: dim},
				event.Splitter{MaxBytes: f.chunkBytes})}
	}
	rec := reconcile.New(cfg, log.With(zap.String("component", "reconcile")), deps)
	out := bufio.NewWriter(e.stdout)
	var rep report
	if f.jsonOutput {
		rep = &jsonReport{w: out}
	} else {
		rep = &tableReport{w: out}
	}
	sum, runErr := rec.Run(ctx, rep)
	rep.summary(sum, rec.StoreNames(), runErr == nil)
	if err := out.Flush(); err != nil && runErr == nil {
		runErr = fmt.Errorf("write the report: %w", err)
	}
	if runErr != nil {
		// A partial run says nothing about the stores: no metrics file.
		return runErr
	}
	if f.metricsFile != "" {
		if err := sum.WriteMetrics(f.metricsFile, rec.StoreNames()); err != nil {
			return err
		}
	}
	if err := f.push.push(ctx, sum.Registry(rec.StoreNames())); err != nil {
		return err
	}
	if n := sum.Unresolved(); n > f.maxDiscrepancies && f.failOnFindings {
		return &exitError{code: exitDiscrepancies, err: fmt.Errorf("%d unresolved discrepancies, more than --max-discrepancies %d", n, f.maxDiscrepancies)}
	}
	return nil
}

// minLeaseTTL bounds --repair-lease-ttl from below: the lease is renewed
// every third of it, and each renewal is a round trip to PostgreSQL.
const minLeaseTTL = time.Second

// takeRepairLease waits for the repair lease (docs/operations.md), which
// projector run respects: while a repair holds it, run's relational writes
// wait, so the relational copy the repair reads stays current, and the
// stores' version guards keep the repair's writes from taking a document
// back. It says how many live members of --group will wait.
func (f *reconcileFlags) takeRepairLease(ctx context.Context, log *zap.Logger, st *stores, faults *fault.Injector) (*postgres.Lease, error) {
	if adm, err := adminOf(&f.kafka, log, "projector-reconcile"); err == nil {
		// Only for the log line: a Kafka that does not answer soon does
		// not hold the repair up.
		askCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		members, err := replay.Members(askCtx, adm, f.group)
		cancel()
		if err == nil && len(members) > 0 {
			log.Info("consumer group has live members: their relational writes wait until the repair ends", zap.String("group", f.group), zap.Int("members", len(members)))
		}
		adm.Close()
	}
	log.Info("taking the repair lease")
	host, _ := os.Hostname()
	holder := fmt.Sprintf("reconcile on %s, pid %d", host, os.Getpid())
	return st.relational.TakeRepairLease(ctx, postgres.LeaseConfig{Holder: holder, TTL: f.leaseTTL, Faults: faults,
		Waiting: func(other string) {
			log.Info("another repair holds the repair lease; waiting for it", zap.String("holder", other))
		}})
}

// report writes discrepancies as they come and the summary at the end.
type report interface {
	reconcile.Reporter
	// summary ends the report; complete is false when the run stopped
	// on an error, and the summary covers what was compared until then.
	summary(s *reconcile.Summary, stores []string, complete bool)
}

// tableReport is the readable report: a header, one line per discrepancy
// with its ids on indented lines, and one summary line.
type tableReport struct {
	w      io.Writer
	header bool
}

const tableRow = "%-10s  %-17s  %-9s  %7s  %5s  %5s  %7s  %5s  %-12s  %s\n"

func (t *tableReport) Report(d *reconcile.Discrepancy) error {
	if !t.header {
		t.header = true
		fmt.Fprintf(t.w, tableRow, "STORE", "CLASS", "STATUS", "VERSION", "WANT", "HELD", "MISSING", "EXTRA", "ACTION", "DOCUMENT")
	}
	version := "-"
	if d.Version > 0 {
		version = strconv.FormatInt(d.Version, 10)
	}
	action := string(d.Action)
	if action == "" {
		action = "-"
	}
	_, err := fmt.Fprintf(t.w, tableRow, d.Store, d.Class, d.Status, version, strconv.Itoa(d.Want), strconv.Itoa(d.Held),
		strconv.Itoa(d.Missing), strconv.Itoa(d.Extra), action, printableKey(d.Key))
	if len(d.StoreVersions) > 0 {
		fmt.Fprintf(t.w, "    store holds versions %v\n", d.StoreVersions)
	}
	if d.NoRecord {
		fmt.Fprintln(t.w, "    no Document node")
	}
	printIDs(t.w, "missing", d.MissingIDs, d.Missing)
	printIDs(t.w, "extra", d.ExtraIDs, d.Extra)
	if d.Note != "" {
		fmt.Fprintf(t.w, "    %s\n", d.Note)
	}
	return err
}

func printIDs(w io.Writer, what string, ids []uuid.UUID, total int) {
	if len(ids) == 0 {
		return
	}
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = id.String()
	}
	more := ""
	if total > len(ids) {
		more = fmt.Sprintf(" and %d more", total-len(ids))
	}
	fmt.Fprintf(w, "    %s: %s%s\n", what, strings.Join(texts, " "), more)
}

// printableKey quotes a key that could break the table: document keys are
// arbitrary UTF-8 and may hold spaces or control characters.
func printableKey(k string) string {
	if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f || r == '\uFFFD' }) {
		return strconv.Quote(k)
	}
	return k
}

func (t *tableReport) summary(s *reconcile.Summary, stores []string, complete bool) {
	switch {
	case !complete:
		fmt.Fprintln(t.w, "incomplete: the run stopped on an error (below); the summary covers what was compared")
	case !t.header:
		fmt.Fprintln(t.w, "no discrepancies")
	}
	fmt.Fprintln(t.w, s.Line(stores))
}

// jsonReport writes JSON lines: {"type":"discrepancy",...} per
// discrepancy, then one {"type":"summary",...}.
type jsonReport struct {
	w io.Writer
}

func (j *jsonReport) Report(d *reconcile.Discrepancy) error {
	return j.write(struct {
		Type string `json:"type"`
		*reconcile.Discrepancy
	}{"discrepancy", d})
}

func (j *jsonReport) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(j.w, "%s\n", b)
	return err
}

func (j *jsonReport) summary(s *reconcile.Summary, stores []string, complete bool) {
	found := make(map[string]map[string]int64, len(stores))
	for _, st := range stores {
		found[st] = map[string]int64{}
		for _, c := range reconcile.Classes {
			found[st][string(c)] = s.Found[st][c]
		}
	}
	_ = j.write(map[string]any{
		"type": "summary", "documents": s.Documents, "unknown_keys": s.UnknownKeys,
		"total": s.Total(), "resolved": s.Resolved, "unresolved": s.Unresolved(),
		"discrepancies": found, "seconds": s.Duration.Seconds(), "capped": s.Capped, "complete": complete,
	})
}

func ledgerPruneCommand(ctx context.Context, args []string, e env) error {
	var (
		lf        logFlags
		sf        storeFlags
		retention time.Duration
		batch     int
		pf        pushFlags
	)
	fs := newFlagSet("ledger-prune", "ledger-prune [flags]", e)
	lf.register(fs)
	sf.registerGraph(fs)
	sf.registerRelational(fs)
	pf.register(fs, "projector_ledger_prune")
	fs.DurationVar(&retention, "retention", 720*time.Hour, "keep ledger rows projected, and the graph's tombstones of documents withdrawn, within this long; older ones go, except each document's current-version row")
	fs.IntVar(&batch, "batch", 1000, "rows (and tombstones) deleted per transaction, 1 to 100000")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	switch {
	case retention <= 0:
		return usageError(errors.New("--retention must be positive"))
	case batch < 1 || batch > 100000:
		return usageError(fmt.Errorf("--batch %d: want 1 to 100000", batch))
	}
	log, err := lf.logger(e)
	if err != nil {
		return usageError(err)
	}
	defer func() { _ = log.Sync() }()
	rel, err := postgres.Open(ctx, sf.postgresDSN, sf.postgresSchema)
	if err != nil {
		return err
	}
	defer rel.Close()
	cutoff := time.Now().Add(-retention)
	start := time.Now()
	deleted, err := rel.PruneLedger(ctx, cutoff, batch, func(n int64) {
		if ce := log.Check(zap.DebugLevel, "ledger prune progress"); ce != nil {
			ce.Write(zap.Int64("deleted", n))
		}
	})
	fmt.Fprintf(e.stdout, "deleted %d ledger rows projected before %s (kept every document's current-version row) in %s\n",
		deleted, cutoff.UTC().Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return err
	}
	gr, err := sf.openGraph()
	if err != nil {
		return err
	}
	defer func() { _ = gr.Close(context.WithoutCancel(ctx)) }()
	start = time.Now()
	tombstones, err := gr.PruneTombstones(ctx, cutoff, batch)
	fmt.Fprintf(e.stdout, "deleted %d graph tombstones of documents withdrawn before %s in %s\n",
		tombstones, cutoff.UTC().Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return err
	}
	return pf.push(ctx, pruneMetrics(deleted, tombstones, time.Now()))
}

// pruneMetrics is the result of a ledger-prune run, for the Pushgateway.
func pruneMetrics(deleted, tombstones int64, finished time.Time) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	rows := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_ledger_prune_deleted_rows", Help: "Ledger rows the last ledger-prune run deleted."})
	graves := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_ledger_prune_deleted_tombstones", Help: "Graph tombstones of withdrawn documents the last ledger-prune run deleted."})
	last := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projector_ledger_prune_last_run_timestamp_seconds", Help: "Unix time at which the last ledger-prune run finished."})
	reg.MustRegister(rows, graves, last)
	rows.Set(float64(deleted))
	graves.Set(float64(tombstones))
	last.Set(float64(finished.UnixNano()) / 1e9)
	return reg
}
