package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
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
const kafkaTimeout = 30 * time.Second

func replayCommand(ctx context.Context, args []string, e env) error {
	var (
		lf           logFlags
		kf           kafkaFlags
		topic        string
		group        string
		to           string
		partitions   string
		dryRun       bool
		removeStatic bool
	)
	fs := newFlagSet("replay", "replay --to earliest|<offset>|<RFC 3339 time> [flags]", e)
	lf.register(fs)
	kf.register(fs)
	fs.StringVar(&topic, "topic", "documents", "topic of the document events")
	fs.StringVar(&group, "group", "projector", "consumer group whose committed offsets are reset")
	fs.StringVar(&to, "to", "", "where the group resumes: earliest, an offset (clamped to each partition's range), or an RFC 3339 time (the first record at or after it)")
	fs.StringVar(&partitions, "partitions", "", "comma-separated partitions to reset (default: all)")
	fs.BoolVar(&dryRun, "dry-run", false, "print the offsets the reset would commit, and change nothing (live members are then only warned about)")
	fs.BoolVar(&removeStatic, "remove-static-members", false, "remove the group's static members (--group-instance-id) by instance id before the reset, once every projector of the group is stopped: a stopped static member stays for the session timeout")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	target, err := parseReplayTarget(to)
	if err != nil {
		return usageError(err)
	}
	if dryRun && removeStatic {
		return usageError(errors.New("--dry-run changes nothing, and --remove-static-members changes the group: give one"))
	}
	chosen, err := parsePartitions(partitions)
	if err != nil {
		return usageError(err)
	}
	log, err := lf.logger(e)
	if err != nil {
		return usageError(err)
	}
	adm, err := newAdmin(&kf, log, "projector-replay")
	if err != nil {
		return err
	}
	defer adm.Close()
	if dryRun {
		if n, err := liveMembers(ctx, adm, group); err == nil && n > 0 {
			fmt.Fprintf(e.stderr, "projector replay: warning: consumer group %s has %d live member(s); stop them before the reset itself\n", group, n)
		}
	} else if err := requireNoMembers(ctx, adm, group, "resetting its offsets", removeStatic, e.stdout); err != nil {
		return err
	}
	rows, err := planReplay(ctx, adm, topic, group, target, chosen)
	if err != nil {
		return err
	}
	if dryRun {
		printReplay(e.stdout, fmt.Sprintf("would reset the offsets of group %s on topic %s (--dry-run: nothing changed):", group, topic), rows)
		return nil
	}
	commit := make(kadm.Offsets)
	for _, r := range rows {
		commit.Add(kadm.Offset{Topic: topic, Partition: r.partition, At: r.after, LeaderEpoch: -1})
	}
	cctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	resp, err := adm.CommitOffsets(cctx, group, commit)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	printReplay(e.stdout, fmt.Sprintf("reset the offsets of group %s on topic %s:", group, topic), rows)
	return nil
}

// newAdmin returns an admin client of the brokers of kf.
func newAdmin(kf *kafkaFlags, log *zap.Logger, clientID string) (*kadm.Client, error) {
	opts, err := kf.opts(log)
	if err != nil {
		return nil, usageError(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID(clientID))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return kadm.NewClient(cl), nil
}

// replayTarget is a parsed --to.
type replayTarget struct {
	earliest bool
	offset   int64 // when >= 0
	at       time.Time
}

func parseReplayTarget(s string) (replayTarget, error) {
	switch {
	case s == "":
		return replayTarget{}, errors.New("--to is required: earliest, an offset or an RFC 3339 time")
	case s == "earliest":
		return replayTarget{earliest: true, offset: -1}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return replayTarget{}, fmt.Errorf("--to %s: an offset is >= 0", s)
		}
		return replayTarget{offset: n}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return replayTarget{}, fmt.Errorf("--to %q: want earliest, an offset or an RFC 3339 time such as 2024-05-01T12:00:00Z", s)
	}
	return replayTarget{offset: -1, at: at}, nil
}

// parsePartitions reads --partitions; nil means all.
func parsePartitions(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--partitions %q: want comma-separated partition numbers", s)
		}
		if !slices.Contains(out, int32(n)) {
			out = append(out, int32(n))
		}
	}
	return out, nil
}

// liveMembers returns the number of members of a consumer group; a group
// that does not exist has none.
func liveMembers(ctx context.Context, adm *kadm.Client, group string) (int, error) {
	members, err := groupMembers(ctx, adm, group)
	return len(members), err
}

// groupMembers returns the members of a consumer group; a group that does
// not exist has none.
func groupMembers(ctx context.Context, adm *kadm.Client, group string) ([]kadm.DescribedGroupMember, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := groups[group]
	if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if g.Err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	return g.Members, nil
}

// requireNoMembers refuses, with exit status 4, to go on while the group
// has live members: they commit offsets and write the stores themselves.
// A static member (--group-instance-id) sends no LeaveGroup when it stops,
// so it stays a member for the group's session timeout; with
// removeStatic, and no dynamic member left, requireNoMembers removes the
// static ones by their instance ids (KIP-345) and says so on out. The
// caller vouches that they are stopped: a running one would join again.
func requireNoMembers(ctx context.Context, adm *kadm.Client, group, doing string, removeStatic bool, out io.Writer) error {
	members, err := groupMembers(ctx, adm, group)
	if err != nil || len(members) == 0 {
		return err
	}
	var static []string
	for _, m := range members {
		if m.InstanceID != nil {
			static = append(static, *m.InstanceID)
		}
	}
	if removeStatic && len(static) == len(members) {
		if err := removeStaticMembers(ctx, adm, group, static); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed the static member(s) %s from consumer group %s\n", strings.Join(static, ", "), group)
		return requireNoMembers(ctx, adm, group, doing, false, out)
	}
	msg := fmt.Sprintf("consumer group %s has %d live member(s); stop every `projector run` of the group before %s", group, len(members), doing)
	if len(static) > 0 {
		msg += fmt.Sprintf("; %d of them are static (instance ids %s), which stay in the group for its session timeout after they stop: "+
			"once every one is stopped, wait that long or give --remove-static-members", len(static), strings.Join(static, ", "))
	}
	return &exitError{code: exitGroupActive, err: errors.New(msg)}
}

// removeStaticMembers removes the members of group with the instance ids.
func removeStaticMembers(ctx context.Context, adm *kadm.Client, group string, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	resps, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(ids...).Reason("projector replay --remove-static-members"))
	if err != nil {
		return fmt.Errorf("remove the static members of group %s: %w", group, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownMemberID) {
			return fmt.Errorf("remove static member %s of group %s: %w", r.InstanceID, group, r.Err)
		}
	}
	return nil
}

// replayRow is one partition's reset.
type replayRow struct {
	partition     int32
	before        int64 // -1: nothing committed
	after         int64
	start, end    int64
	clampedFrom   int64 // the asked offset, when it was clamped; else -1
	noRecordAfter bool  // --to a time after the last record: the end offset
}

// planReplay computes the new offset of every chosen partition.
func planReplay(ctx context.Context, adm *kadm.Client, topic, group string, target replayTarget, chosen []int32) ([]replayRow, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	var byTime kadm.ListedOffsets
	if !target.earliest && target.offset < 0 {
		byTime, err = adm.ListOffsetsAfterMilli(ctx, target.at.UnixMilli(), topic)
		if err == nil {
			err = byTime.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("list offsets of %s after %s: %w", topic, target.at.Format(time.RFC3339), err)
		}
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetch committed offsets of group %s: %w", group, err)
	}
	var all []int32
	for p := range starts[topic] {
		all = append(all, p)
	}
	slices.Sort(all)
	if chosen == nil {
		chosen = all
	}
	rows := make([]replayRow, 0, len(chosen))
	for _, p := range chosen {
		if !slices.Contains(all, p) {
			return nil, usageError(fmt.Errorf("--partitions: topic %s has no partition %d (it has %d)", topic, p, len(all)))
		}
		start, _ := starts.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		r := replayRow{partition: p, before: -1, start: start.Offset, end: end.Offset, clampedFrom: -1}
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			r.before = c.At
		}
		switch {
		case target.earliest:
			r.after = r.start
		case target.offset >= 0:
			r.after = min(max(target.offset, r.start), r.end)
			if r.after != target.offset {
				r.clampedFrom = target.offset
			}
		default:
			o, _ := byTime.Lookup(topic, p)
			r.after = o.Offset
			if o.Offset < 0 || o.Offset >= r.end {
				r.after, r.noRecordAfter = r.end, true
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// printReplay prints a heading and the offsets before and after, per
// partition.
func printReplay(w io.Writer, heading string, rows []replayRow) {
	fmt.Fprintln(w, heading)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tBEFORE\tAFTER\tSTART\tEND\tNOTE")
	for _, r := range rows {
		before := "none"
		if r.before >= 0 {
			before = strconv.FormatInt(r.before, 10)
		}
		note := ""
		switch {
		case r.clampedFrom >= 0:
			note = fmt.Sprintf("offset %d is outside the partition's range %d..%d; clamped", r.clampedFrom, r.start, r.end)
		case r.noRecordAfter:
			note = "no record at or after that time; set to the end"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\n", r.partition, before, r.after, r.start, r.end, note)
	}
	_ = tw.Flush()
}
