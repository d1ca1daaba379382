// Package replay plans and makes the reset of a consumer group's committed
// offsets that `projector replay` does, the way kafka-consumer-groups
// --reset-offsets does it: a plan first (each partition's committed offset
// now and after, the records and documents to be read again, the members
// the reset waits for), which changes nothing, and the reset only when
// asked, once the group has no member left.
//
// A reset under a live member would be undone by it: it commits its own
// positions after the reset, and writes the stores meanwhile. So Execute
// resets only an empty group. A member that stops leaves the group (a
// dynamic one at once, a static one, KIP-345, when its session times out);
// Wait waits for that, and removes no one: a static member the broker still
// lists is one whose session is live, and removing it would let a running
// process rejoin after the reset.
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Target is where the group resumes: the earliest offset, an offset, or
// the first record at or after a time.
type Target struct {
	Earliest bool
	Offset   int64 // when >= 0
	At       time.Time
}

// ParseTarget reads --to: earliest, an offset, or an RFC 3339 time.
func ParseTarget(s string) (Target, error) {
	switch {
	case s == "":
		return Target{}, errors.New("--to is required: earliest, an offset or an RFC 3339 time")
	case s == "earliest":
		return Target{Earliest: true, Offset: -1}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return Target{}, fmt.Errorf("--to %s: an offset is >= 0", s)
		}
		return Target{Offset: n}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Target{}, fmt.Errorf("--to %q: want earliest, an offset or an RFC 3339 time such as 2024-05-01T12:00:00Z", s)
	}
	return Target{Offset: -1, At: at}, nil
}

// ParsePartitions reads --partitions; nil means all.
func ParsePartitions(s string) ([]int32, error) {
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

// Row is one partition's reset.
type Row struct {
	Partition     int32
	Now           int64 // the committed offset now; -1: nothing committed
	After         int64
	Start, End    int64
	ClampedFrom   int64 // the asked offset, when it was clamped; else -1
	NoRecordAfter bool  // --to a time after the last record: the end offset
}

// Reread is the number of records the group reads again: those between the
// new offset and the one committed now (none when nothing is committed:
// the group has read nothing, and reads from After what it never read).
func (r Row) Reread() int64 {
	if r.Now < 0 || r.After >= r.Now {
		return 0
	}
	return r.Now - r.After
}

// Skipped is the number of records the group will never read: the reset
// moves it forward past them.
func (r Row) Skipped() int64 {
	if r.Now < 0 || r.After <= r.Now {
		return 0
	}
	return r.After - r.Now
}

// Member is a live member of the group, as the broker lists it.
type Member struct {
	ID, InstanceID, ClientID, Host string
}

// Static reports whether the member has a group instance id (KIP-345): it
// stays in the group for its session timeout after its process stops.
func (m Member) Static() bool { return m.InstanceID != "" }

// String names the member as an operator finds it: its instance id (the
// pod's name in the StatefulSet) or its member id, and its host.
func (m Member) String() string {
	name := m.ID
	if m.Static() {
		name = m.InstanceID + " (static)"
	}
	return name + " on " + m.Host
}

// Plan is a reset, before it is made.
type Plan struct {
	Topic, Group string
	Rows         []Row
	// Members are the group's live members: the reset waits for them to
	// leave.
	Members []Member
	// Documents is the number of distinct document keys among the records
	// read again, counted in the first Counted of them (all of them when
	// Counted equals the sum of Reread).
	Documents, Counted int64
}

// Reread sums the rows' records read again.
func (p Plan) Reread() int64 {
	var n int64
	for _, r := range p.Rows {
		n += r.Reread()
	}
	return n
}

// UsageError is an argument the topic contradicts (a partition it does not
// have): the command's usage is wrong, and nothing was done.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Timeout bounds each admin call, so an unreachable broker fails the
// command instead of hanging it.
const Timeout = 30 * time.Second

// Make plans the reset of group on topic to target, on the chosen
// partitions (nil: all), and lists the group's members. It changes nothing.
func Make(ctx context.Context, adm *kadm.Client, topic, group string, target Target, chosen []int32) (Plan, error) {
	plan := Plan{Topic: topic, Group: group}
	rows, err := rows(ctx, adm, topic, group, target, chosen)
	if err != nil {
		return plan, err
	}
	plan.Rows = rows
	plan.Members, err = Members(ctx, adm, group)
	return plan, err
}

func rows(ctx context.Context, adm *kadm.Client, topic, group string, target Target, chosen []int32) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
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
	if !target.Earliest && target.Offset < 0 {
		byTime, err = adm.ListOffsetsAfterMilli(ctx, target.At.UnixMilli(), topic)
		if err == nil {
			err = byTime.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("list offsets of %s after %s: %w", topic, target.At.Format(time.RFC3339), err)
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
	out := make([]Row, 0, len(chosen))
	for _, p := range chosen {
		if !slices.Contains(all, p) {
			return nil, &UsageError{fmt.Errorf("--partitions: topic %s has no partition %d (it has %d)", topic, p, len(all))}
		}
		start, _ := starts.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		r := Row{Partition: p, Now: -1, Start: start.Offset, End: end.Offset, ClampedFrom: -1}
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			r.Now = c.At
		}
		switch {
		case target.Earliest:
			r.After = r.Start
		case target.Offset >= 0:
			r.After = min(max(target.Offset, r.Start), r.End)
			if r.After != target.Offset {
				r.ClampedFrom = target.Offset
			}
		default:
			o, _ := byTime.Lookup(topic, p)
			r.After = o.Offset
			if o.Offset < 0 || o.Offset >= r.End {
				r.After, r.NoRecordAfter = r.End, true
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// Members returns the live members of a consumer group; a group that does
// not exist has none.
func Members(ctx context.Context, adm *kadm.Client, group string) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
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
	out := make([]Member, 0, len(g.Members))
	for _, m := range g.Members {
		mm := Member{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
		if m.InstanceID != nil {
			mm.InstanceID = *m.InstanceID
		}
		out = append(out, mm)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// ActiveError is the refusal to reset a group that still has members.
type ActiveError struct {
	Group   string
	Members []Member
	Waited  time.Duration
}

func (e *ActiveError) Error() string {
	names := make([]string, len(e.Members))
	static := 0
	for i, m := range e.Members {
		names[i] = m.String()
		if m.Static() {
			static++
		}
	}
	msg := fmt.Sprintf("consumer group %s has %d live member(s): %s; stop every `projector run` of the group before resetting its offsets",
		e.Group, len(e.Members), strings.Join(names, ", "))
	if e.Waited > 0 {
		msg = fmt.Sprintf("after waiting %s, ", e.Waited) + msg
	}
	if static > 0 {
		msg += fmt.Sprintf("; %d of them are static, and a stopped static member stays in the group until its session times out "+
			"(run's --session-timeout, 45s by default): once every one is stopped, give --wait longer than that; "+
			"one the broker still lists after its session timeout is running", static)
	}
	return msg
}

// Wait waits up to wait for the group to have no member, asking the broker
// every poll, and calls waiting with the members each time they change.
// It returns an *ActiveError when members remain.
func Wait(ctx context.Context, adm *kadm.Client, group string, wait, poll time.Duration, waiting func([]Member)) error {
	start := time.Now()
	var last []Member
	for {
		members, err := Members(ctx, adm, group)
		if err != nil {
			return err
		}
		if len(members) == 0 {
			return nil
		}
		if waiting != nil && !slices.Equal(members, last) {
			waiting(members)
		}
		last = members
		if time.Since(start)+poll > wait {
			return &ActiveError{Group: group, Members: members, Waited: time.Since(start).Round(time.Second)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Execute commits the plan's offsets. The broker takes them only while the
// group has no member: a member that joined since the last Wait makes it
// fail with an *ActiveError, and nothing is reset.
func Execute(ctx context.Context, adm *kadm.Client, plan Plan) error {
	commit := make(kadm.Offsets)
	for _, r := range plan.Rows {
		commit.Add(kadm.Offset{Topic: plan.Topic, Partition: r.Partition, At: r.After, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	resp, err := adm.CommitOffsets(ctx, plan.Group, commit)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
		members, _ := Members(ctx, adm, plan.Group)
		return &ActiveError{Group: plan.Group, Members: members}
	}
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", plan.Group, err)
	}
	return nil
}

// CountDocuments counts the distinct document keys (record keys) among the
// records the plan reads again, reading them with a client of opts; it
// stops after limit records or after budget, so that a plan over a long
// log stays quick, and says how many it read in plan.Counted.
func CountDocuments(ctx context.Context, opts []kgo.Opt, plan *Plan, limit int64, budget time.Duration) error {
	plan.Documents, plan.Counted = 0, 0
	want := map[int32][2]int64{} // partition: [from, to)
	offsets := map[int32]kgo.Offset{}
	for _, r := range plan.Rows {
		if r.Reread() > 0 {
			want[r.Partition] = [2]int64{r.After, r.Now}
			offsets[r.Partition] = kgo.NewOffset().At(r.After)
		}
	}
	if len(want) == 0 || limit <= 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("projector-replay-count"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{plan.Topic: offsets}))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	keys := map[string]struct{}{}
	defer func() { plan.Documents = int64(len(keys)) }()
	pollCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for len(want) > 0 && plan.Counted < limit {
		fetches := cl.PollFetches(pollCtx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if pollCtx.Err() != nil {
			return nil // the budget is spent: plan.Counted says how far it got
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("read %s: %w", plan.Topic, ferr)
		}
		for _, r := range fetches.Records() {
			span, ok := want[r.Partition]
			if !ok || plan.Counted >= limit {
				continue
			}
			if r.Offset >= span[1] { // compaction removed the last ones
				delete(want, r.Partition)
				continue
			}
			keys[string(r.Key)] = struct{}{}
			plan.Counted++
			if r.Offset+1 >= span[1] {
				delete(want, r.Partition)
			}
		}
	}
	return nil
}
