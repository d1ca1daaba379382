//go:build faults

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/projector/projector/internal/project"
)

// Env is the variable that configures faults: a comma-separated list of
//
//	<point>=exit:<probability>   exit the process with status 86 at point
//	<point>=pause:<duration>     sleep at point (to widen a window)
//	<point>=hold:<duration>      sleep at point deaf to cancellation (a
//	                             store write that is on its way and lands
//	                             late whatever the caller does)
//	<point>=await:<path>         like hold, until a file exists at path: a
//	                             test creates it once the other side of the
//	                             interleaving it forces has happened
//	drop-index=<substring>       the index skips the writes and withdrawals
//	                             of documents whose key contains it
//
// Points: before-index, index-checked (after the token check of an index
// write, before the write), after-index, after-graph, after-relational,
// reproject (before a re-projection after a fence mismatch), token (between taking a
// partition's token and raising the graph's), settle and settle-write
// (before the index's settle, and between its reads and its write) (run);
// before-relational-commit (run: inside the relational write's transaction,
// its statements run and its partition's row held, before COMMIT);
// before-repair-write (reconcile --repair, between reading the relational
// copy and writing it), before-repair-delete (reconcile --delete-orphans,
// between finding documents the decision store does not know and deleting
// them), repair-after-index and repair-after-graph (reconcile --repair,
// between its writes of the stores), before-repair-lease-renew (reconcile --repair or --delete-orphans,
// before each renewal of the repair lease: an await there stalls the
// renewals as a stalled process would); after-redrive-publish (redrive,
// between publishing a batch and committing past it).
const Env = "PROJECTOR_FAULTS"

type action struct {
	exitProbability float64
	pause           time.Duration
	hold            time.Duration
	await           string
}

// FromEnv parses Env; it returns nil when the variable is empty.
func FromEnv(getenv func(string) string) (*Injector, error) {
	spec := getenv(Env)
	if spec == "" {
		return nil, nil
	}
	in := &Injector{points: map[string]action{}, exit: os.Exit}
	for _, item := range strings.Split(spec, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("%s: %q: want point=action", Env, item)
		}
		if name == "drop-index" {
			in.dropIndex = value
			continue
		}
		kind, arg, _ := strings.Cut(value, ":")
		a := in.points[name]
		switch kind {
		case "exit":
			p, err := strconv.ParseFloat(arg, 64)
			if err != nil || p < 0 || p > 1 {
				return nil, fmt.Errorf("%s: %q: want exit:<probability 0..1>", Env, item)
			}
			a.exitProbability = p
		case "pause", "hold":
			d, err := time.ParseDuration(arg)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: want %s:<duration>", Env, item, kind)
			}
			if kind == "hold" {
				a.hold = d
			} else {
				a.pause = d
			}
		case "await":
			if arg == "" {
				return nil, fmt.Errorf("%s: %q: want await:<path>", Env, item)
			}
			a.await = arg
		default:
			return nil, fmt.Errorf("%s: %q: unknown action %q", Env, item, kind)
		}
		in.points[name] = a
	}
	return in, nil
}

func (in *Injector) at(ctx context.Context, point string) {
	a, ok := in.points[point]
	if !ok {
		return
	}
	if a.await != "" {
		fmt.Fprintf(os.Stderr, "fault: holding at %s until %s exists\n", point, a.await)
		for {
			if _, err := os.Stat(a.await); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "fault: released at %s\n", point)
	}
	if a.exitProbability > 0 && rand.Float64() < a.exitProbability {
		fmt.Fprintf(os.Stderr, "fault: injected crash at %s\n", point)
		in.exit(ExitCode)
	}
	if a.hold > 0 {
		fmt.Fprintf(os.Stderr, "fault: holding at %s for %s\n", point, a.hold)
		time.Sleep(a.hold)
		fmt.Fprintf(os.Stderr, "fault: released at %s\n", point)
	}
	if a.pause > 0 {
		fmt.Fprintf(os.Stderr, "fault: pausing at %s for %s\n", point, a.pause)
		select {
		case <-ctx.Done():
		case <-time.After(a.pause):
		}
	}
}

// WrapIndex returns idx, or with a drop fault an index that silently skips
// writes of some documents.
func (in *Injector) WrapIndex(idx project.Index) project.Index {
	if in == nil || in.dropIndex == "" {
		return idx
	}
	return &droppingIndex{Index: idx, substring: in.dropIndex}
}

// droppingIndex skips the documents a drop-index fault names.
type droppingIndex struct {
	project.Index
	substring string
}

func (d *droppingIndex) Apply(ctx context.Context, w *project.Write) error {
	kept := *w
	kept.Live, kept.Withdrawn = nil, nil
	for _, doc := range w.Live {
		if !strings.Contains(doc.Key, d.substring) {
			kept.Live = append(kept.Live, doc)
		}
	}
	for _, doc := range w.Withdrawn {
		if !strings.Contains(doc.Key, d.substring) {
			kept.Withdrawn = append(kept.Withdrawn, doc)
		}
	}
	return d.Index.Apply(ctx, &kept)
}
