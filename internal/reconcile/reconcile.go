package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// Config selects what a run compares and what it may change.
type Config struct {
	// Prefix keeps only documents whose key starts with it.
	Prefix string
	// Since, when set, compares only documents updated at or after it and
	// skips the scans for unknown documents (they have no update time).
	Since time.Time
	// PageSize is the number of documents (or scanned keys) per page;
	// memory grows with it.
	PageSize int
	// Repair re-projects documents that are missing, skewed or withdrawn
	// but present, from the relational copy.
	Repair bool
	// DeleteOrphans re-projects live documents with orphaned chunks and
	// deletes the chunks of unknown documents.
	DeleteOrphans bool
	// ProgressEvery is the number of documents between progress log lines.
	ProgressEvery int
	// MaxUnknown bounds the unknown documents a scan of one store reports
	// without DeleteOrphans (default 100,000): it remembers each, since a
	// store may return a key in several pages, so memory grows with them
	// (the stores are scanned at once: up to three times the bound). A
	// scan that reaches it stops and says so; DeleteOrphans removes what
	// it reports, needs to remember none, and has no bound.
	MaxUnknown int
}

// Deps are what a run reads and writes.
type Deps struct {
	Decisions Decisions
	Source    Source
	// Stores are read in this order, which is also the report's.
	Stores []Store
	// Writes is used by Repair and DeleteOrphans only.
	Writes WriteOrder
	// Lease is the repair lease, which Repair and DeleteOrphans need: each
	// of their writes, to any store, runs under it.
	Lease Lease
	// Faults, when set, is told the points before a repair's writes:
	// before-repair-write, between reading the relational copy and writing
	// it again, and before-repair-delete, between finding documents the
	// decision store does not know and deleting them (tests only).
	Faults Faults
	// Log, when set, gives back from the document topic the documents
	// whose chunk rows the relational copy lacks; without it they are
	// unrepairable.
	Log Log
}

// Faults injects failures between the steps of a repair (tests only).
type Faults interface {
	At(ctx context.Context, point string)
}

// Reporter receives each discrepancy as soon as its page is done.
type Reporter interface {
	Report(d *Discrepancy) error
}

// Reconciler runs reconciliations. It holds no state between runs.
type Reconciler struct {
	cfg Config
	log *zap.Logger
	d   Deps
}

// New returns a Reconciler.
func New(cfg Config, log *zap.Logger, d Deps) *Reconciler {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1000
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10000
	}
	if cfg.MaxUnknown <= 0 {
		cfg.MaxUnknown = 100000
	}
	return &Reconciler{cfg: cfg, log: log, d: d}
}

// Summary counts what a run found and did.
type Summary struct {
	// Documents is the number of decision-store documents compared.
	Documents int64
	// UnknownKeys is the number of document keys found in a store but not
	// in the decision store.
	UnknownKeys int64
	// Found counts discrepancies per store and class.
	Found map[string]map[Class]int64
	// Resolved counts the discrepancies the run repaired or deleted.
	Resolved int64
	Started  time.Time
	Duration time.Duration
	// Capped lists the stores whose scan for unknown documents stopped at
	// Config.MaxUnknown: they may hold more.
	Capped []string
}

// Total is the number of discrepancies found.
func (s *Summary) Total() int64 {
	var n int64
	for _, byClass := range s.Found {
		for _, c := range byClass {
			n += c
		}
	}
	return n
}

// Unresolved is the number of discrepancies the run left as they were.
func (s *Summary) Unresolved() int64 { return s.Total() - s.Resolved }

// Line renders the summary as one line of key=value pairs, every store and
// class included, so scripts can read it.
func (s *Summary) Line(stores []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "summary documents=%d unknown_keys=%d total=%d resolved=%d unresolved=%d",
		s.Documents, s.UnknownKeys, s.Total(), s.Resolved, s.Unresolved())
	for _, st := range stores {
		for _, c := range Classes {
			fmt.Fprintf(&b, " %s.%s=%d", st, c, s.Found[st][c])
		}
	}
	fmt.Fprintf(&b, " seconds=%s", strconv.FormatFloat(s.Duration.Seconds(), 'f', 1, 64))
	if len(s.Capped) > 0 {
		fmt.Fprintf(&b, " capped=%s", strings.Join(s.Capped, ","))
	}
	return b.String()
}

// StoreNames returns the labels of the run's stores in report order.
func (r *Reconciler) StoreNames() []string {
	out := make([]string, len(r.d.Stores))
	for i, s := range r.d.Stores {
		out[i] = s.Name()
	}
	return out
}

// Run compares every selected document and, unless Since is set, finds
// each store's unknown documents. The comparison and the scans of the
// stores run at once, each on its own goroutine: a discrepancy goes to out
// as soon as its page is compared (and repaired, when asked), so the lines
// of the scans come between those of the comparison. A store that can count
// what it holds (a Counter) is counted before the comparison and after it
// instead, and scanned only when a count differs from what the comparison
// read of it. An error means a store could not be read or written; the
// summary then covers what was done so far.
func (r *Reconciler) Run(ctx context.Context, out Reporter) (*Summary, error) {
	sum := &Summary{Found: map[string]map[Class]int64{}, Started: time.Now()}
	for _, s := range r.d.Stores {
		sum.Found[s.Name()] = map[Class]int64{}
	}
	if (r.cfg.Repair || r.cfg.DeleteOrphans) && r.d.Lease == nil {
		return sum, errors.New("a repair needs the repair lease")
	}
	err := r.run(ctx, &tally{sum: sum, out: out})
	// The scans end in any order; the summary names stores in report order.
	slices.SortFunc(sum.Capped, func(a, b string) int {
		return slices.Index(r.StoreNames(), a) - slices.Index(r.StoreNames(), b)
	})
	sum.Duration = time.Since(sum.Started)
	return sum, err
}

// run is Run's work: the counts, the comparison, and the scans of the
// stores that the counts cannot spare.
func (r *Reconciler) run(ctx context.Context, t *tally) error {
	scan := r.cfg.Since.IsZero()
	var before []*int64
	if scan {
		var err error
		if before, err = r.counts(ctx); err != nil {
			return err
		}
	}
	// held is what the comparison read of each store, in items; only the
	// goroutine of the comparison touches it.
	held := make([]int64, len(r.d.Stores))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := r.compareDocuments(gctx, t, held); err != nil || !scan {
			return err
		}
		cg, cctx := errgroup.WithContext(gctx)
		for i, s := range r.d.Stores {
			if before[i] != nil {
				cg.Go(func() error { return r.scanUnlessCounted(cctx, s, *before[i], held[i], t) })
			}
		}
		return cg.Wait()
	})
	if scan {
		for i, s := range r.d.Stores {
			if before[i] == nil {
				g.Go(func() error { return r.scanUnknown(gctx, s, t) })
			}
		}
	}
	return g.Wait()
}

// counts returns what each Counter store holds of the run's prefix, nil for
// the stores that cannot count it.
func (r *Reconciler) counts(ctx context.Context) ([]*int64, error) {
	out := make([]*int64, len(r.d.Stores))
	for i, s := range r.d.Stores {
		c, ok := s.(Counter)
		if !ok {
			continue
		}
		n, ok, err := c.Count(ctx, r.cfg.Prefix)
		if err != nil {
			return nil, fmt.Errorf("count the %s store: %w", s.Name(), err)
		}
		if ok {
			out[i] = &n
		}
	}
	return out, nil
}

// scanUnlessCounted scans a Counter store for unknown documents unless it
// holds, now as before the comparison, just the items the comparison read:
// then every item belongs to a document the decision store knows.
func (r *Reconciler) scanUnlessCounted(ctx context.Context, s Store, before, held int64, t *tally) error {
	after, ok, err := s.(Counter).Count(ctx, r.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("count the %s store: %w", s.Name(), err)
	}
	if ok && after == before && after == held {
		r.log.Info("counted a store: it holds nothing of unknown documents", zap.String("store", s.Name()), zap.Int64("items", held))
		return nil
	}
	return r.scanUnknown(ctx, s, t)
}

// tally is a run's summary and report, which the comparison and the scans
// share: every method holds mu, so out is called by one goroutine at a time.
type tally struct {
	mu  sync.Mutex
	sum *Summary
	out Reporter
}

// emit counts and reports found.
func (t *tally) emit(found []Discrepancy) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range found {
		d := &found[i]
		t.sum.Found[d.Store][d.Class]++
		if d.Resolved() {
			t.sum.Resolved++
		}
		if err := t.out.Report(d); err != nil {
			return fmt.Errorf("write the report: %w", err)
		}
	}
	return nil
}

// compared counts n documents compared and returns the counts so far.
func (t *tally) compared(n int) (documents, discrepancies int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sum.Documents += int64(n)
	return t.sum.Documents, t.sum.Total()
}

// unknown counts n unknown documents a scan reported.
func (t *tally) unknown(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sum.UnknownKeys += int64(n)
}

// capped records that a store's scan stopped at Config.MaxUnknown.
func (t *tally) capped(store string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sum.Capped = append(t.sum.Capped, store)
}

// readAhead is the number of pages read from the stores while an earlier
// page is compared, so that no store waits for the others or for the
// comparison; a run holds at most readAhead+2 pages.
const readAhead = 2

// page is a page of decisions and, once done is closed, what each store
// holds of them, in the order of Deps.Stores.
type page struct {
	docs     []Decision
	holdings []map[string]Holding
	done     chan struct{}
}

// compareDocuments pages through the decision store and compares each page
// with every store, adding to held the items it read of each. One
// goroutine reads the decision store's pages in key order and starts each
// page's reads of the stores; another compares the pages in that order as
// their reads end.
func (r *Reconciler) compareDocuments(ctx context.Context, t *tally, held []int64) error {
	g, gctx := errgroup.WithContext(ctx)
	pages := make(chan *page, readAhead)
	g.Go(func() error {
		defer close(pages)
		return r.readPages(gctx, g, pages)
	})
	g.Go(func() error {
		nextLog := int64(r.cfg.ProgressEvery)
		for p := range pages {
			select {
			case <-p.done:
			case <-gctx.Done():
				return gctx.Err()
			}
			var found []Discrepancy
			for _, d := range p.docs {
				for i, s := range r.d.Stores {
					h := p.holdings[i][d.Key]
					held[i] += items(h)
					found = append(found, compare(s.Name(), d, h)...)
				}
			}
			if err := r.repair(gctx, found); err != nil {
				return err
			}
			if err := t.emit(found); err != nil {
				return err
			}
			if docs, total := t.compared(len(p.docs)); docs >= nextLog {
				r.progress(t.sum.Started, docs, total)
				nextLog += int64(r.cfg.ProgressEvery)
			}
		}
		return nil
	})
	return g.Wait()
}

// readPages reads the decision store in keyset pages and sends each to
// pages, having started the reads of its holdings in g.
func (r *Reconciler) readPages(ctx context.Context, g *errgroup.Group, pages chan<- *page) error {
	q := Page{Prefix: r.cfg.Prefix, Since: r.cfg.Since, Limit: r.cfg.PageSize}
	for {
		docs, err := r.d.Decisions.Decisions(ctx, q)
		if err != nil {
			return fmt.Errorf("read the decision store: %w", err)
		}
		if len(docs) == 0 {
			return nil
		}
		p := &page{docs: docs, done: make(chan struct{})}
		g.Go(func() error {
			keys := make([]string, len(docs))
			for i, d := range docs {
				keys[i] = d.Key
			}
			h, err := r.holdings(ctx, keys)
			if err != nil {
				return err
			}
			p.holdings = h
			close(p.done)
			return nil
		})
		select {
		case pages <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(docs) < q.Limit {
			return nil
		}
		q.After = docs[len(docs)-1].Key
	}
}

// holdings reads a page's keys from every store at once.
func (r *Reconciler) holdings(ctx context.Context, keys []string) ([]map[string]Holding, error) {
	out := make([]map[string]Holding, len(r.d.Stores))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range r.d.Stores {
		g.Go(func() error {
			h, err := s.Holdings(gctx, keys)
			if err != nil {
				return fmt.Errorf("read the %s store: %w", s.Name(), err)
			}
			out[i] = h
			return nil
		})
	}
	return out, g.Wait()
}

func (r *Reconciler) progress(started time.Time, documents, discrepancies int64) {
	secs := time.Since(started).Seconds()
	r.log.Info("reconcile progress", zap.Int64("documents", documents), zap.Int64("discrepancies", discrepancies),
		zap.Float64("documents_per_second", float64(documents)/max(secs, 1e-9)))
}

// repair re-projects, from the relational copy and in the write order, the
// documents of found that it may: missing, skewed and withdrawn-present
// ones with Repair, live ones with orphans with DeleteOrphans. It marks
// each discrepancy it settled.
func (r *Reconciler) repair(ctx context.Context, found []Discrepancy) error {
	var keys []string
	for _, d := range found {
		if r.mayReproject(&d) && !slices.Contains(keys, d.Key) {
			keys = append(keys, d.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	w, incomplete, err := r.d.Source.Reprojection(ctx, keys)
	if err != nil {
		return fmt.Errorf("read the relational copy for a repair: %w", err)
	}
	lost := map[string]error{}
	if len(incomplete) > 0 && r.d.Log != nil {
		lacking := slices.Sorted(maps.Keys(incomplete))
		docs, gone, err := r.d.Log.Documents(ctx, lacking)
		if err != nil {
			return fmt.Errorf("read the log for a repair: %w", err)
		}
		for _, d := range docs {
			w.Live = append(w.Live, d)
			delete(incomplete, d.Key)
			r.log.Info("rebuilt a document from its event in the log", zap.String("document_key", d.Key), zap.Int64("version", d.Version),
				zap.String("topic", d.Position.Topic), zap.Int32("partition", d.Position.Partition), zap.Int64("offset", d.Position.Offset))
		}
		lost = gone
	}
	r.fault(ctx, "before-repair-write")
	if !w.Empty() {
		if err := r.d.Writes.Apply(ctx, r.d.Lease, w); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
	}
	written := make(map[string]bool, len(keys))
	for _, k := range w.Keys() {
		written[k] = true
	}
	for i := range found {
		d := &found[i]
		switch lacking, ok := incomplete[d.Key]; {
		case ok && r.mayReproject(d):
			d.Action, d.Note = Unrepairable, fmt.Sprintf("the relational copy lacks the chunk rows of ordinals %v", lacking)
			if why := lost[d.Key]; why != nil {
				d.Note += "; the log cannot give them back: " + why.Error()
			}
		case written[d.Key]:
			// Re-projecting a document leaves each store with exactly its
			// current chunks, orphans of the document included.
			d.Action = Reprojected
		}
		if written[d.Key] {
			r.log.Debug("re-projected", zap.String("document_key", d.Key), zap.String("store", d.Store), zap.String("class", string(d.Class)))
		}
	}
	return nil
}

// fault tells Deps.Faults that the repair is at point.
func (r *Reconciler) fault(ctx context.Context, point string) {
	if r.d.Faults != nil {
		r.d.Faults.At(ctx, point)
	}
}

func (r *Reconciler) mayReproject(d *Discrepancy) bool {
	if d.Status == StatusUnknown {
		return false
	}
	if d.Class == Orphaned {
		return r.cfg.DeleteOrphans
	}
	return r.cfg.Repair
}

// scanUnknown scans one store for documents the decision store does not
// know, reports each once, and deletes them with DeleteOrphans.
func (r *Reconciler) scanUnknown(ctx context.Context, s Store, t *tally) error {
	reported := map[string]bool{}
	var scanned, unknownHere int64
	err := s.ScanKeys(ctx, r.cfg.Prefix, r.cfg.PageSize, func(keys []string) error {
		scanned += int64(len(keys))
		fresh := make([]string, 0, len(keys))
		for _, k := range keys {
			if !reported[k] {
				fresh = append(fresh, k)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		known, err := r.d.Decisions.Known(ctx, fresh)
		if err != nil {
			return fmt.Errorf("read the decision store: %w", err)
		}
		var unknownKeys []string
		for _, k := range fresh {
			if !known[k] {
				unknownKeys = append(unknownKeys, k)
			}
		}
		if len(unknownKeys) == 0 {
			return nil
		}
		holdings, err := s.Holdings(ctx, unknownKeys)
		if err != nil {
			return fmt.Errorf("read the %s store: %w", s.Name(), err)
		}
		found := make([]Discrepancy, 0, len(unknownKeys))
		for _, k := range unknownKeys {
			if !r.cfg.DeleteOrphans {
				// Deleted keys cannot come again; reported ones can.
				reported[k] = true
			}
			h := holdings[k]
			if len(h.Chunks) == 0 && !h.Present {
				// Gone since the scan read it.
				continue
			}
			found = append(found, unknown(s.Name(), k, h))
		}
		if r.cfg.DeleteOrphans && len(found) > 0 {
			r.fault(ctx, "before-repair-delete")
			err := underLease(ctx, r.d.Lease, func(ctx context.Context) error { return s.DeleteDocuments(ctx, unknownKeys) })
			if err != nil {
				return fmt.Errorf("delete unknown documents from the %s store: %w", s.Name(), err)
			}
			for i := range found {
				found[i].Action = Deleted
			}
		}
		t.unknown(len(found))
		unknownHere += int64(len(found))
		if err := t.emit(found); err != nil {
			return err
		}
		if len(reported) >= r.cfg.MaxUnknown {
			return errCapped
		}
		return nil
	})
	if errors.Is(err, errCapped) {
		t.capped(s.Name())
		r.log.Warn("stopped scanning a store for unknown documents: it holds more than --max-unknown of them; remove them with --delete-orphans, which has no bound, or look at them first",
			zap.String("store", s.Name()), zap.Int("max_unknown", r.cfg.MaxUnknown))
		return nil
	}
	if err != nil {
		return err
	}
	r.log.Info("scanned a store for unknown documents", zap.String("store", s.Name()), zap.Int64("keys", scanned), zap.Int64("unknown", unknownHere))
	return nil
}

// errCapped ends a scan for unknown documents at Config.MaxUnknown.
var errCapped = errors.New("too many unknown documents")
