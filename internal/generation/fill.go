package generation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector/projector/internal/project"
)

// The fill builds a new generation from the relational copy, which holds
// the text of every live chunk (the log may no longer hold every event).
// It is a second writer of the generation beside run, which writes every
// event to it from the generation's registration on, and races it: a fill
// that read a document before run wrote the document's next version, or
// withdrew it, would leave the read version's points there, since the
// index's conditional upsert guards existing points only and the points of
// another version have other ids. So the fill orders itself after run as
// the owner of a partition settles after a late writer: after writing a
// page it reads the page's documents from the relational store again and
// prunes, in the generation, every point of an event before the one now
// stored (Index.Prune), which no writer needs again. A write of run that
// commits after that read follows the fill's write, and run's fence of the
// generation, after its commit, finds and re-projects what the fill left.
//
// One fill writes a generation at a time: it holds the generation's fill
// lease (FillStore), renewed with each page's progress, and gives its
// index writes a deadline before the lease could expire, so a fill that
// takes the lease after another's expired meets no late write of it. A
// fill killed at any line is resumed by the next, from the progress
// recorded (the page after the last one pruned), once the lease expired.

// ErrRegistered says that the generation is registered already, as it is
// to be: a start run again.
var ErrRegistered = errors.New("the generation is registered already")

// ConflictError is a change of the registry that its state refuses.
type ConflictError struct{ Why string }

func (e *ConflictError) Error() string { return e.Why }

// FillHeldError says that another fill holds the generation's fill lease.
type FillHeldError struct {
	Generation int
	For        time.Duration
}

func (e *FillHeldError) Error() string {
	return fmt.Sprintf("another fill of generation %d holds its lease for %s more: let it finish, or run this again once it expired", e.Generation, e.For.Round(time.Second))
}

// FillLostError says that the fill's lease expired or was taken: it must
// write nothing more.
type FillLostError struct {
	Generation int
	Token      int64
}

func (e *FillLostError) Error() string {
	return fmt.Sprintf("the fill lease of generation %d (token %d) was lost: its page took longer than the lease, or another fill took it; run the fill again", e.Generation, e.Token)
}

// CanRegister returns nil when g may be registered as the generation to
// build next, ErrRegistered when it is the generation building already,
// and a *ConflictError otherwise.
func (s Set) CanRegister(g Generation) error {
	n, building, err := s.next(g.Embedder)
	switch {
	case err != nil:
		return err
	case building != nil && building.Number == g.Number && building.Collection == g.Collection:
		return ErrRegistered
	case building != nil || g.Number != n:
		return &ConflictError{Why: fmt.Sprintf("generation %d cannot be registered: the next is %d (another start ran meanwhile)", g.Number, n)}
	}
	return nil
}

// Next returns the generation to build next under alias with emb, and
// whether it is the one being built already (a start run again).
func (s Set) Next(alias string, emb Embedder) (Generation, bool, error) {
	n, building, err := s.next(emb)
	if err != nil {
		return Generation{}, false, err
	}
	if building != nil {
		return *building, true, nil
	}
	return Generation{Alias: alias, Number: n, Collection: CollectionOf(alias, n), Embedder: emb, State: Building}, false, nil
}

// next returns the number of the next generation, or the generation being
// built with emb; another generation being built, or one written with emb
// already, is a *ConflictError.
func (s Set) next(emb Embedder) (int, *Generation, error) {
	n := 1
	for i, g := range s {
		if g.State == Building {
			if g.Embedder.Same(emb) {
				return g.Number, &s[i], nil
			}
			return 0, nil, &ConflictError{Why: fmt.Sprintf("%s is being built: abort it first, or run its start again with its embedder", g)}
		}
		n = max(n, g.Number+1)
	}
	if err := emb.known(); err != nil {
		return 0, nil, fmt.Errorf("embedder %s: %w", emb, err)
	}
	for _, g := range s.Written() {
		if g.Embedder.Same(emb) {
			return 0, nil, &ConflictError{Why: fmt.Sprintf("%s already embeds with %s", g, emb)}
		}
	}
	return n, nil, nil
}

// Progress is how far a fill is.
type Progress struct {
	// After is the last document key filled: the fill goes on after it.
	After             string
	Documents, Chunks int64
	Done              bool
}

// FillStore is what the fill needs of the relational store.
type FillStore interface {
	TakeFill(ctx context.Context, g Generation, ttl time.Duration) (token int64, p Progress, err error)
	RenewFill(ctx context.Context, g Generation, token int64, ttl time.Duration, p Progress) error
	ReleaseFill(ctx context.Context, g Generation, token int64) error
	LiveKeys(ctx context.Context, after string, limit int) ([]string, error)
	CountLive(ctx context.Context) (int64, error)
	Reprojection(ctx context.Context, keys []string) (*project.Write, map[string][]int, error)
}

// FillIndex is what the fill needs of the generation's collection.
type FillIndex interface {
	Apply(ctx context.Context, w *project.Write) error
	Prune(ctx context.Context, w *project.Write) error
}

// FillConfig configures a fill.
type FillConfig struct {
	// PageSize is the documents of one page.
	PageSize int
	// LeaseTTL is how long the fill lease outlives its last renewal; a
	// page's writes must end a sixth of it before.
	LeaseTTL time.Duration
	// Progress receives a line per page: documents, chunks, rate, ETA.
	Progress io.Writer
	// Metrics, when set, counts what the fill wrote.
	Metrics *FillMetrics
	// Clock, when set, measures the lease (tests).
	Clock func() time.Time
}

// Fill fills generation g from the relational copy with its embedder,
// resuming where the last fill stopped, until every live document is in:
// it then records the fill done. It returns the progress reached.
func Fill(ctx context.Context, cfg FillConfig, store FillStore, idx FillIndex, emb project.Embedder, g Generation) (Progress, error) {
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	taken := now()
	token, p, err := store.TakeFill(ctx, g, cfg.LeaseTTL)
	if err != nil {
		return p, err
	}
	renewed := taken
	defer func() { _ = store.ReleaseFill(context.WithoutCancel(ctx), g, token) }()
	total, err := store.CountLive(ctx)
	if err != nil {
		return p, err
	}
	margin := cfg.LeaseTTL / 6
	start, startDocs := now(), p.Documents
	renew := func(p Progress) error {
		sent := now()
		if err := store.RenewFill(ctx, g, token, cfg.LeaseTTL, p); err != nil {
			return err
		}
		renewed = sent
		return nil
	}
	cfg.Metrics.resume(g.Number, p)
	for !p.Done {
		keys, err := store.LiveKeys(ctx, p.After, cfg.PageSize)
		if err != nil {
			return p, err
		}
		if len(keys) == 0 {
			p.Done = true
			if err := renew(p); err != nil {
				return p, err
			}
			cfg.Metrics.done(g.Number)
			return p, nil
		}
		current, _, err := store.Reprojection(ctx, keys)
		if err != nil {
			return p, err
		}
		w, err := project.Reembed(ctx, emb, g.Number, current)
		if err != nil {
			return p, fmt.Errorf("embed for generation %d: %w", g.Number, err)
		}
		if err := renew(p); err != nil {
			return p, err
		}
		// The writes end before the lease could: the next fill finds no
		// write of this one landing after it took the lease.
		wctx, cancel := context.WithDeadline(ctx, renewed.Add(cfg.LeaseTTL-margin))
		err = idx.Apply(wctx, w)
		if err == nil {
			// run may have moved the page's documents on since they were
			// read: prune what the write left of earlier events.
			var after *project.Write
			if after, _, err = store.Reprojection(wctx, keys); err == nil {
				err = idx.Prune(wctx, after)
			}
		}
		cancel()
		if err != nil {
			return p, fmt.Errorf("fill generation %d: %w", g.Number, err)
		}
		chunks := 0
		for _, d := range w.Live {
			chunks += len(d.Chunks)
		}
		p.After, p.Documents, p.Chunks = keys[len(keys)-1], p.Documents+int64(len(w.Live)), p.Chunks+int64(chunks)
		if err := renew(p); err != nil {
			return p, err
		}
		cfg.Metrics.page(g.Number, len(w.Live), chunks)
		if cfg.Progress != nil {
			fmt.Fprintln(cfg.Progress, progressLine(g.Number, p, total, p.Documents-startDocs, now().Sub(start)))
		}
	}
	return p, nil
}

// progressLine says how far the fill is: documents and chunks, the rate
// of this run and the time left at it.
func progressLine(n int, p Progress, total, done int64, took time.Duration) string {
	rate := 0.0
	if took > 0 {
		rate = float64(done) / took.Seconds()
	}
	eta := "unknown"
	if left := total - p.Documents; rate > 0 && left > 0 {
		eta = (time.Duration(float64(left) / rate * float64(time.Second))).Round(time.Second).String()
	} else if left <= 0 {
		eta = "0s"
	}
	return fmt.Sprintf("generation %d: %d of about %d documents, %d chunks, %.0f documents/s, ETA %s", n, p.Documents, total, p.Chunks, rate, eta)
}

// FillMetrics are the metrics of a fill, for the command that runs it to
// push (a Job's pod is gone before Prometheus scrapes it).
type FillMetrics struct {
	documents, chunks *prometheus.GaugeVec
	filled            *prometheus.GaugeVec
}

// NewFillMetrics registers the fill's metrics on reg.
func NewFillMetrics(reg prometheus.Registerer) *FillMetrics {
	m := &FillMetrics{
		documents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "projector_generation_fill_documents",
			Help: "Documents the fill of an index generation has written from the relational copy, over all its runs.",
		}, []string{"generation"}),
		chunks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "projector_generation_fill_chunks",
			Help: "Chunks the fill of an index generation has written from the relational copy, over all its runs.",
		}, []string{"generation"}),
		filled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "projector_generation_fill_done",
			Help: "1 once the fill of an index generation has written every live document, else 0.",
		}, []string{"generation"}),
	}
	reg.MustRegister(m.documents, m.chunks, m.filled)
	return m
}

func (m *FillMetrics) resume(n int, p Progress) {
	if m == nil {
		return
	}
	label := strconv.Itoa(n)
	m.documents.WithLabelValues(label).Set(float64(p.Documents))
	m.chunks.WithLabelValues(label).Set(float64(p.Chunks))
	m.filled.WithLabelValues(label).Set(0)
	if p.Done {
		m.filled.WithLabelValues(label).Set(1)
	}
}

func (m *FillMetrics) page(n, documents, chunks int) {
	if m == nil {
		return
	}
	m.documents.WithLabelValues(strconv.Itoa(n)).Add(float64(documents))
	m.chunks.WithLabelValues(strconv.Itoa(n)).Add(float64(chunks))
}

func (m *FillMetrics) done(n int) {
	if m != nil {
		m.filled.WithLabelValues(strconv.Itoa(n)).Set(1)
	}
}
