package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/generation"
)

// generationFlags are the flags of `projector generation <action>`; one
// flag set serves every action.
type generationFlags struct {
	log      logFlags
	stores   storeFlags
	embed    embedderFlags
	execute  bool
	pageSize int
	leaseTTL time.Duration
	push     pushFlags
}

func (f *generationFlags) register(fs *flag.FlagSet) {
	f.log.register(fs)
	f.stores.register(fs)
	f.embed.register(fs)
	fs.BoolVar(&f.execute, "execute", false, "start: create, register and fill the generation; abort: drop it; without it they print the plan and change nothing, as replay does")
	fs.IntVar(&f.pageSize, "fill-page-size", 256, "documents the fill reads, embeds and writes at once; a page must be written within five sixths of --fill-lease-ttl")
	fs.DurationVar(&f.leaseTTL, "fill-lease-ttl", 60*time.Second, "how long the fill lease outlives its last renewal (renewed with every page): a fill killed at any line is resumed by the next start once it expired")
	f.push.register(fs, "projector_generation_fill")
}

// generationActions are the actions of `projector generation`.
var generationActions = map[string]func(ctx context.Context, f *generationFlags, log *zap.Logger, st *stores, e env) error{
	"start":  generationStart,
	"status": generationStatus,
	"abort":  generationAbort,
}

func generationCommand(ctx context.Context, args []string, e env) error {
	var f generationFlags
	fs := newFlagSet("generation", "generation start|status|abort [flags]", e)
	f.register(fs)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		return parse(fs, args, e)
	}
	if len(args) == 0 || generationActions[args[0]] == nil {
		fs.Usage()
		return usageError(errors.New("want an action: start, status or abort"))
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
// embedder, points and fill, and which one the alias points at.
func generationStatus(ctx context.Context, _ *generationFlags, _ *zap.Logger, st *stores, e env) error {
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
	fmt.Fprintln(tw, "GENERATION\tSTATE\tCOLLECTION\tEMBEDDER\tPOINTS\tFILL")
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", g.Number, g.State, g.Collection, g.Embedder, points, fill)
	}
	return tw.Flush()
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
