package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/replay"
)

// Exit codes beside 0 (done), 1 (error) and 2 (usage).
const (
	// exitDiscrepancies: reconcile found more discrepancies than allowed,
	// or ids --check found an id missing from a store.
	exitDiscrepancies = 3
	// exitGroupActive: the consumer group has live members, so its offsets
	// may not be reset nor the stores repaired under it.
	exitGroupActive = 4
)

// kafkaTimeout bounds each admin call, so an unreachable broker fails the
// command instead of hanging it.
const kafkaTimeout = replay.Timeout

// countBudget bounds the reading of the records a replay would read again,
// to count their documents, so that the plan of a long log comes quickly.
const countBudget = 30 * time.Second

func replayCommand(ctx context.Context, args []string, e env) error {
	var (
		lf           logFlags
		kf           kafkaFlags
		topic        string
		group        string
		to           string
		partitions   string
		execute      bool
		dryRun       bool
		removeStatic bool
		wait         time.Duration
		countLimit   int64
	)
	fs := newFlagSet("replay", "replay --to earliest|<offset>|<RFC 3339 time> [--execute] [flags]", e)
	lf.register(fs)
	kf.register(fs)
	fs.StringVar(&topic, "topic", "documents", "topic of the document events")
	fs.StringVar(&group, "group", "projector", "consumer group whose committed offsets are reset")
	fs.StringVar(&to, "to", "", "where the group resumes: earliest, an offset (clamped to each partition's range), or an RFC 3339 time (the first record at or after it)")
	fs.StringVar(&partitions, "partitions", "", "comma-separated partitions to reset (default: all)")
	fs.BoolVar(&execute, "execute", false, "reset the offsets; without it replay prints the plan and changes nothing, like kafka-consumer-groups --reset-offsets (a terminal is asked instead)")
	fs.DurationVar(&wait, "wait", time.Minute, "with --execute, how long to wait for the group's members to leave: a stopped static member (--group-instance-id) leaves when its session times out (run's --session-timeout, 45s by default), so make it longer than that")
	fs.Int64Var(&countLimit, "count-documents", 100000, "records to read, at most, to count the documents the replay reads again (0: count none)")
	fs.BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing: what replay does without --execute (kept for scripts that pass it)")
	fs.BoolVar(&removeStatic, "remove-static-members", false, "removed: replay no longer removes members; see --wait")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	target, err := replay.ParseTarget(to)
	if err != nil {
		return usageError(err)
	}
	chosen, err := replay.ParsePartitions(partitions)
	if err != nil {
		return usageError(err)
	}
	switch {
	case removeStatic:
		return usageError(errors.New("--remove-static-members is gone: it removed members the broker still listed, " +
			"which a running process joins again after the reset. replay --execute waits (--wait) for stopped members to leave; " +
			"a stopped static member leaves when its session times out: give --wait longer than run's --session-timeout"))
	case dryRun && execute:
		return usageError(errors.New("--dry-run changes nothing and --execute resets: give one"))
	case wait < 0:
		return usageError(fmt.Errorf("--wait %s: want 0 or more", wait))
	case countLimit < 0:
		return usageError(fmt.Errorf("--count-documents %d: want 0 or more", countLimit))
	}
	log, err := lf.logger(e)
	if err != nil {
		return usageError(err)
	}
	opts, err := kf.opts(log)
	if err != nil {
		return usageError(err)
	}
	adm, err := newAdmin(opts, "projector-replay")
	if err != nil {
		return err
	}
	defer adm.Close()

	plan, err := replay.Make(ctx, adm, topic, group, target, chosen)
	if _, ok := errors.AsType[*replay.UsageError](err); ok {
		return usageError(err)
	}
	if err != nil {
		return err
	}
	if err := replay.CountDocuments(ctx, opts, &plan, countLimit, countBudget); err != nil {
		return err
	}
	printPlan(e.stdout, plan, wait)
	if !execute {
		if !e.interactive || dryRun || !confirm(e.stdin, e.stdout) {
			fmt.Fprintf(e.stdout, "nothing changed: run again with --execute to reset these offsets\n")
			return nil
		}
	}
	if len(plan.Members) > 0 {
		fmt.Fprintf(e.stdout, "waiting up to %s for the group's members to leave...\n", wait)
	}
	err = replay.Wait(ctx, adm, group, wait, time.Second, nil)
	if err == nil {
		// The members committed as they left: plan again from what they left.
		if plan, err = replay.Make(ctx, adm, topic, group, target, chosen); err == nil {
			err = replay.Execute(ctx, adm, plan)
		}
	}
	if active, ok := errors.AsType[*replay.ActiveError](err); ok {
		return &exitError{code: exitGroupActive, err: fmt.Errorf("%w; nothing was reset", active)}
	}
	if err != nil {
		return err
	}
	printRows(e.stdout, fmt.Sprintf("reset the offsets of group %s on topic %s:", group, topic), plan.Rows)
	return nil
}

// confirm asks on a terminal whether to reset, and reads the answer.
func confirm(in io.Reader, out io.Writer) bool {
	fmt.Fprint(out, "reset these offsets? type yes to go on: ")
	answer, _ := bufio.NewReader(in).ReadString('\n')
	return strings.TrimSpace(answer) == "yes"
}

// newAdmin returns an admin client of the brokers of opts.
func newAdmin(opts []kgo.Opt, clientID string) (*kadm.Client, error) {
	cl, err := kgo.NewClient(append(opts, kgo.ClientID(clientID))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return kadm.NewClient(cl), nil
}

// adminOf returns an admin client of the brokers of kf.
func adminOf(kf *kafkaFlags, log *zap.Logger, clientID string) (*kadm.Client, error) {
	opts, err := kf.opts(log)
	if err != nil {
		return nil, usageError(err)
	}
	return newAdmin(opts, clientID)
}

// printPlan prints what a replay would do: each partition's offsets, the
// records and documents read again, and the members a reset waits for.
func printPlan(w io.Writer, plan replay.Plan, wait time.Duration) {
	printRows(w, fmt.Sprintf("plan: reset the offsets of group %s on topic %s (nothing is changed yet):", plan.Group, plan.Topic), plan.Rows)
	reread := plan.Reread()
	docs := fmt.Sprintf("%d documents", plan.Documents)
	switch {
	case reread == 0:
		docs = "no document"
	case plan.Counted == 0:
		docs = "documents not counted (--count-documents 0)"
	case plan.Counted < reread:
		docs = fmt.Sprintf("at least %d documents (counted in the first %d records; --count-documents)", plan.Documents, plan.Counted)
	}
	fmt.Fprintf(w, "the group reads %d records again, of %s\n", reread, docs)
	if len(plan.Members) == 0 {
		fmt.Fprintf(w, "the group has no live member\n")
		return
	}
	fmt.Fprintf(w, "the group has %d live member(s); --execute waits up to %s (--wait) for them to leave, and resets nothing while one remains:\n", len(plan.Members), wait)
	for _, m := range plan.Members {
		how := "leaves when its process stops"
		if m.Static() {
			how = "leaves when its session times out after its process stops"
		}
		fmt.Fprintf(w, "  %s: %s\n", m, how)
	}
}

// printRows prints a heading and each partition's offsets now and after.
func printRows(w io.Writer, heading string, rows []replay.Row) {
	fmt.Fprintln(w, heading)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tNOW\tAFTER\tRE-READ\tSTART\tEND\tNOTE")
	for _, r := range rows {
		now, reread := "none", "-"
		if r.Now >= 0 {
			now, reread = strconv.FormatInt(r.Now, 10), strconv.FormatInt(r.Reread(), 10)
		}
		var notes []string
		switch {
		case r.ClampedFrom >= 0:
			notes = append(notes, fmt.Sprintf("offset %d is outside the partition's range %d..%d; clamped", r.ClampedFrom, r.Start, r.End))
		case r.NoRecordAfter:
			notes = append(notes, "no record at or after that time; set to the end")
		}
		if n := r.Skipped(); n > 0 {
			notes = append(notes, fmt.Sprintf("skips %d records, never read", n))
		}
		if r.Now < 0 {
			notes = append(notes, "nothing committed")
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%s\n", r.Partition, now, r.After, reread, r.Start, r.End, strings.Join(notes, "; "))
	}
	_ = tw.Flush()
}
