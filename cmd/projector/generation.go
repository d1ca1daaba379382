package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/reconcile"
)

// generationFlags are the flags of `projector generation <action>`; one
// flag set serves every action.
type generationFlags struct {
	log      logFlags
	stores   storeFlags
	embed    embedderFlags
	execute  bool
	force    bool
	compare  bool
	to       int
	grace    time.Duration
	pageSize int
	leaseTTL time.Duration
	push     pushFlags
}

func (f *generationFlags) register(fs *flag.FlagSet) {
	f.log.register(fs)
	f.stores.register(fs)
	f.embed.register(fs)
	fs.BoolVar(&f.execute, "execute", false, "start: create, register and fill the generation; switch: move the alias to it; retire: stop writing the old one, and delete it after --grace; abort: drop it; without it they print the plan and change nothing, as replay does")
	fs.BoolVar(&f.force, "force", false, "switch: move the alias even when the generation's fill is not done or a reconcile of it is not clean (readers may then miss documents)")
	fs.BoolVar(&f.compare, "compare", false, "status: compare each generation run writes with the relational copy, as switch does (three comparisons 2 s apart: it reads every chunk id of each)")
	fs.IntVar(&f.to, "to", 0, "switch: the generation to switch to (0: the one being built); a retiring one is a switch back, possible until it is retired")
	fs.DurationVar(&f.grace, "grace", time.Hour, "retire: how long the retired generation's collection is kept before a retire run again deletes it (members still writing it as their live one halt meanwhile; readers of its own name still find it)")
	fs.IntVar(&f.pageSize, "fill-page-size", 256, "documents the fill reads, embeds and writes at once; a page must be written within five sixths of --fill-lease-ttl")
	fs.DurationVar(&f.leaseTTL, "fill-lease-ttl", 60*time.Second, "how long the fill lease outlives its last renewal (renewed with every page): a fill killed at any line is resumed by the next start once it expired")
	f.push.register(fs, "projector_generation_fill")
}

// generationActions are the actions of `projector generation`.
var generationActions = map[string]func(ctx context.Context, f *generationFlags, log *zap.Logger, st *stores, e env) error{
	"start":  generationStart,
	"status": generationStatus,
	"switch": generationSwitch,
	"retire": generationRetire,
	"abort":  generationAbort,
}

func generationCommand(ctx context.Context, args []string, e env) error {
	var f generationFlags
	fs := newFlagSet("generation", "generation start|status|switch|retire|abort [flags]", e)
	f.register(fs)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		return parse(fs, args, e)
	}
	if len(args) == 0 || generationActions[args[0]] == nil {
		fs.Usage()
		return usageError(errors.New("want an action: start, status, switch, retire or abort"))
	}
	action := generationActions[args[0]]
	if err := parse(fs, args[1:], e); err != nil {
		return err
	}
	if err := f.embed.resolve(fs, &f.stores.vectorDim, e.getenv); err != nil {
		return err
	}
	if f.pageSize < 1 || f.pageSize > maxPageSize {
		return usageError(fmt.Errorf("--fill-page-size %d: want 1 to %d", f.pageSize, maxPageSize))
	}
	if f.grace < 0 {
		return usageError(fmt.Errorf("--grace %s: want 0 or more", f.grace))
	}
	if f.leaseTTL < minLeaseTTL {
		return usageError(fmt.Errorf("--fill-lease-ttl %s: want at least %s", f.leaseTTL, minLeaseTTL))
	}
	log, err := f.log.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	st, err := f.stores.openLive(ctx)
	if err != nil {
		return err
	}
	defer st.close(context.WithoutCancel(ctx))
	if _, ok := st.generations.Live(); !ok {
		return errors.New("the generation registry has no live generation: run projector migrate first")
	}
	return action(ctx, &f, log, st, e)
}

// generationStart plans generation N+1 with the embedder flags and, with
// --execute, creates its collection, registers it (from then on run
// writes it) and fills it from the relational copy. Run again, it goes on
// with the generation being built: every step is safe to repeat.
func generationStart(ctx context.Context, f *generationFlags, log *zap.Logger, st *stores, e env) error {
	next, rerun, err := st.generations.Next(st.alias, f.embed.generation())
	if err != nil {
		return err
	}
	live, _ := st.generations.Live()
	total, err := st.relational.CountLive(ctx)
	if err != nil {
		return err
	}
	if rerun {
		fmt.Fprintf(e.stdout, "%s is being built: %d documents filled (done: %v); start goes on with its fill.\n", next, next.Fill.Documents, next.Fill.Done)
	} else {
		fmt.Fprintf(e.stdout, "new %s, beside the live %s: the collection is created, and run writes every event to it from its registration on.\n", next, live)
	}
	fmt.Fprintf(e.stdout, "The fill writes the %d live documents of the relational copy to it, embedded with %s; the alias %s stays on generation %d.\n",
		total, next.Embedder, st.alias, live.Number)
	if !f.execute {
		fmt.Fprintln(e.stdout, "Nothing changed: run again with --execute.")
		return nil
	}
	idx := st.qdrant.ForCollection(next.Collection, next.Embedder.Dim)
	if !rerun {
		if err := idx.Migrate(ctx); err != nil {
			return fmt.Errorf("create the collection of %s: %w", next, err)
		}
		if _, err := st.relational.RegisterGeneration(ctx, next); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "registered %s: run writes it from now on.\n", next)
	}
	reg := prometheus.NewRegistry()
	emb, err := f.embed.openGeneration(ctx, log.With(zap.String("component", "embed")), reg, st.relational, next)
	if err != nil {
		return err
	}
	p, err := generation.Fill(ctx, generation.FillConfig{PageSize: f.pageSize, LeaseTTL: f.leaseTTL, Progress: e.stderr,
		Metrics: generation.NewFillMetrics(reg)}, st.relational, idx, emb, next)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "filled generation %d: %d documents, %d chunks.\n", next.Number, p.Documents, p.Chunks)
	return f.push.push(ctx, reg)
}

// generationStatus prints each generation: its state, collection,
// embedder, points and fill, and which one the alias points at; with
// --compare, whether each generation run writes equals the relational
// copy.
func generationStatus(ctx context.Context, f *generationFlags, log *zap.Logger, st *stores, e env) error {
	kind, target, err := st.qdrant.Resolve(ctx, st.alias)
	if err != nil {
		return err
	}
	switch kind {
	case generation.NameAlias:
		fmt.Fprintf(e.stdout, "alias %s -> %s\n", st.alias, target)
	case generation.NameCollection:
		fmt.Fprintf(e.stdout, "%s is a collection of its own (a generation from before generations), not an alias\n", st.alias)
	default:
		fmt.Fprintf(e.stdout, "alias %s does not exist: readers find nothing; projector migrate creates it\n", st.alias)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GENERATION\tSTATE\tCOLLECTION\tEMBEDDER\tPOINTS\tFILL\tRELATIONAL COPY")
	for _, g := range st.generations {
		points := "-"
		if g.State.Written() {
			n, err := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim).CountPoints(ctx)
			if err != nil {
				return err
			}
			points = fmt.Sprint(n)
		}
		fill := "-"
		if g.State == generation.Building {
			fill = fmt.Sprintf("%d documents, %d chunks", g.Fill.Documents, g.Fill.Chunks)
			if g.Fill.Done {
				fill += ", done"
			}
		}
		equal := "-"
		if f.compare && g.State.Written() {
			differ, err := compareGeneration(ctx, log, st, g, e)
			if err != nil {
				return err
			}
			equal = "equal"
			if len(differ) > 0 {
				equal = fmt.Sprintf("%d documents differ", len(differ))
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Number, g.State, g.Collection, g.Embedder, points, fill, equal)
	}
	return tw.Flush()
}

// switchChecks is how many times switch compares the generation with the
// relational copy, switchPause apart, before it takes a difference for
// real (generation.Verify): a document that run is writing while it is
// compared differs for a moment.
const (
	switchChecks = 3
	switchPause  = 2 * time.Second
)

// generationSwitch moves the alias readers search to the generation
// being built, once its fill is done and a reconcile of it is clean
// (unless --force): with --execute, the registry first (the generation
// live, the old live one retiring, which run still writes), then one alias
// operation. Run again after it was killed anywhere, it finishes the
// switch the registry recorded.
func generationSwitch(ctx context.Context, f *generationFlags, log *zap.Logger, st *stores, e env) error {
	sw, err := st.generations.Switching(f.to, f.force)
	if err != nil {
		return err
	}
	kind, target, err := st.qdrant.Resolve(ctx, st.alias)
	if err != nil {
		return err
	}
	if sw.Registered && kind == generation.NameAlias && target == sw.To.Collection {
		fmt.Fprintf(e.stdout, "the alias %s points at %s already: nothing to switch.\n", st.alias, sw.To)
		return nil
	}
	if sw.Registered {
		fmt.Fprintf(e.stdout, "the registry switched to %s already; the alias %s is moved to %s.\n", sw.To, st.alias, sw.To.Collection)
	} else {
		fmt.Fprintf(e.stdout, "switch the alias %s from %s to %s: the registry first, then one alias operation; readers find one or the other throughout.\n", st.alias, sw.From, sw.To)
		if sw.FromState() == generation.Retired {
			fmt.Fprintf(e.stdout, "%s is a collection named as the alias, which cannot exist beside it: it is deleted, then the alias created (readers find nothing between the two calls), and it is retired at once: members writing it as their live one halt their partitions, saying to restart them; restart them then (docs/upgrading.md).\n", sw.From)
		} else {
			fmt.Fprintf(e.stdout, "%s becomes retiring: run still writes it, so a switch back stays possible, until projector generation retire. Members keep writing it as their live one until restarted: roll them before the retire.\n", sw.From)
		}
	}
	if !f.execute {
		fmt.Fprintln(e.stdout, "Nothing changed: run again with --execute.")
		return nil
	}
	if !sw.Registered {
		if f.force {
			fmt.Fprintf(e.stdout, "--force: not comparing %s with the relational copy.\n", sw.To)
		} else if err := checkGeneration(ctx, log, st, sw.To, e); err != nil {
			return err
		}
		if err := st.relational.SwitchGeneration(ctx, sw, !f.force); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "registered generation %d live, generation %d %s.\n", sw.To.Number, sw.From.Number, sw.FromState())
	}
	if err := st.qdrant.PointAlias(ctx, st.alias, sw.To.Collection); err != nil {
		return fmt.Errorf("the registry switched to generation %d, the alias not yet (run switch again): %w", sw.To.Number, err)
	}
	fmt.Fprintf(e.stdout, "the alias %s points at %s: readers search generation %d.\n", st.alias, sw.To.Collection, sw.To.Number)
	return nil
}

// checkGeneration compares generation g's collection with the relational
// copy (compareGeneration) and returns an error naming the documents that
// differ for real, if any.
func checkGeneration(ctx context.Context, log *zap.Logger, st *stores, g generation.Generation, e env) error {
	differ, err := compareGeneration(ctx, log, st, g, e)
	if err != nil {
		return err
	}
	if len(differ) == 0 {
		fmt.Fprintf(e.stdout, "compared %s with the relational copy: equal.\n", g)
		return nil
	}
	keys := slices.Sorted(maps.Keys(differ))
	return &generation.ConflictError{Why: fmt.Sprintf("%s differs from the relational copy in %d documents at the same version in %d comparisons (%s): projector reconcile --generation %d lists them; abort and start it again, or switch with --force",
		g, len(differ), switchChecks, strings.Join(keys[:min(len(keys), 5)], ", "), g.Number)}
}

// compareGeneration compares generation g's collection with the
// relational copy, as reconcile --generation does, switchChecks times
// (generation.Verify), and returns the documents that differ for real.
func compareGeneration(ctx context.Context, log *zap.Logger, st *stores, g generation.Generation, e env) (map[string]int64, error) {
	idx := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim)
	pass := 0
	return generation.Verify(ctx, func(ctx context.Context) (map[string]int64, error) {
		pass++
		found := differing{}
		rec := reconcile.New(reconcile.Config{}, log.With(zap.String("component", "reconcile")),
			reconcile.Deps{Decisions: st.relational, Source: st.relational, Stores: []reconcile.Store{idx}})
		sum, err := rec.Run(ctx, found)
		if err != nil {
			return nil, fmt.Errorf("compare %s with the relational copy: %w", g, err)
		}
		fmt.Fprintf(e.stderr, "comparison %d of %s with the relational copy: %d documents, %d differ\n", pass, g, sum.Documents, len(found))
		return found, nil
	}, switchChecks, switchPause)
}

// differing takes a reconcile's report: the documents that differ, with
// the version the relational copy holds (0: withdrawn or unknown).
type differing map[string]int64

func (d differing) Report(r *reconcile.Discrepancy) error {
	d[r.Key] = r.Version
	return nil
}

// generationRetire retires the generation the alias left: with
// --execute, run stops writing it (the registry marks it retired), and
// once its grace passed its collection is deleted; run again, it goes on
// where it stopped.
func generationRetire(ctx context.Context, f *generationFlags, _ *zap.Logger, st *stores, e env) error {
	g, ok := st.generations.Retirable()
	if !ok {
		return errors.New("no generation is retiring (a switch leaves the old live one retiring), nor retired with its collection left: nothing to retire")
	}
	live, _ := st.generations.Live()
	if g.State == generation.Retiring {
		fmt.Fprintf(e.stdout, "%s is retired: run stops writing it, so switching back to it is no longer possible. A member still writing it as its live one (started before the switch) halts its partitions, saying to restart it: restart every member before, so that each writes the live %s.\n", g, live)
		fmt.Fprintf(e.stdout, "Its collection %s is kept for --grace %s, then deleted by a retire run again.\n", g.Collection, f.grace)
	} else {
		fmt.Fprintf(e.stdout, "%s is retired; its collection %s is deleted once its grace passed.\n", g, g.Collection)
	}
	if !f.execute {
		fmt.Fprintln(e.stdout, "Nothing changed: run again with --execute.")
		return nil
	}
	left, err := st.relational.RetireGeneration(ctx, g, f.grace)
	if err != nil {
		return err
	}
	if g.State == generation.Retiring {
		fmt.Fprintf(e.stdout, "retired generation %d: run no longer writes it.\n", g.Number)
	}
	if left > 0 {
		fmt.Fprintf(e.stdout, "collection %s is kept %s more: run projector generation retire --execute again then to delete it.\n", g.Collection, left.Round(time.Second))
		return nil
	}
	// A legacy generation's collection went with the switch, and its name
	// is the alias's now: only a collection of that name is deleted.
	kind, _, err := st.qdrant.Resolve(ctx, g.Collection)
	if err != nil {
		return err
	}
	if kind != generation.NameCollection {
		fmt.Fprintf(e.stdout, "collection %s is deleted already.\n", g.Collection)
		return nil
	}
	if err := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim).Drop(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted collection %s.\n", g.Collection)
	return nil
}

// generationAbort drops the generation being built: with --execute, run
// stops writing it (the registry marks it aborted), and once no fill can
// write it any more, its collection is deleted. Run again, it goes on
// where it stopped.
func generationAbort(ctx context.Context, f *generationFlags, _ *zap.Logger, st *stores, e env) error {
	g, ok := st.generations.Abortable()
	if !ok {
		return errors.New("no generation is being built, nor aborted with its collection left: nothing to abort")
	}
	fmt.Fprintf(e.stdout, "%s is dropped: run stops writing it, and its collection %s is deleted once no fill holds its lease.\n", g, g.Collection)
	if !f.execute {
		fmt.Fprintln(e.stdout, "Nothing changed: run again with --execute.")
		return nil
	}
	if err := st.relational.AbortGeneration(ctx, g); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "aborted generation %d: run no longer writes it.\n", g.Number)
	for {
		left, err := st.relational.FillHeldFor(ctx, g)
		if err != nil {
			return err
		}
		if left == 0 {
			break
		}
		fmt.Fprintf(e.stderr, "a fill of generation %d holds its lease for %s more: waiting, as its writes may land until then\n", g.Number, left.Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(left):
		}
	}
	if err := st.qdrant.ForCollection(g.Collection, g.Embedder.Dim).Drop(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted collection %s.\n", g.Collection)
	return nil
}
