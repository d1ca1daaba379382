// Package redrive publishes dead letters back to the document topic once
// their cause is fixed: the last step of the recipe in docs/operations.md
// ("Dead letters"), which Kafka Connect users know as re-processing a
// dead-letter queue.
//
// A redrive reads the dead-letter topic from the position its group
// committed (the start, the first time) up to the end offsets it found when
// it began, so it ends even while new dead letters arrive. It publishes the
// records its Selection matches, with their original key, value (a
// tombstone stays a tombstone) and headers, less the headers the projector
// added, plus project.HeaderOriginalPosition, into the partition their
// original was in: the projector judges a redriven record at its first
// place in the log, so it has the effect its original would have had
// there, however late and however often it comes back.
//
// The position never passes a letter the selection did not send: the
// committed offset stops at the first letter left unsent, and the commit's
// metadata keeps how far each selection run in the group sent (position.go),
// so that a rerun sends nothing twice and another selection sharing the
// group loses nothing. A redrive killed between publishing and committing
// sends those records again, which the projector takes as the redelivery it
// is. While it sends, a redrive is its group's only member, so a second one
// is refused (ErrBusy). A dead letter cut to fit the dead-letter topic
// (dlq.HeaderTruncated) is sent whole: its record is read again at its
// source position, once its topic id and key show it is the same record;
// one whose record is gone for good (ErrGone) is the only letter the
// position passes unsent.
package redrive

import (
	"bytes"
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
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/retry"
)

// HeaderRedrivenFrom names the dead letter a redriven record came from
// (topic/partition/offset), so that a record dead-lettered again can be
// traced to its first failure.
const HeaderRedrivenFrom = "projector-redriven-from"

// Selection says which dead letters to send back. The zero Selection
// matches every dead letter.
type Selection struct {
	// Reasons are projector-error-reason values; empty matches any.
	Reasons []string
	// Since and Until bound the dead letter's timestamp, the time it was
	// dead-lettered: Since inclusive, Until exclusive; zero is unbounded.
	Since, Until time.Time
	// From and To bound the offset in the dead-letter topic, in every
	// partition: From inclusive, To exclusive; 0 and -1 are unbounded.
	From, To int64
}

// Match reports whether r, a record of the dead-letter topic, is selected.
func (s Selection) Match(r *kgo.Record) bool {
	if len(s.Reasons) > 0 {
		reason := header(r, dlq.HeaderReason)
		found := false
		for _, want := range s.Reasons {
			found = found || reason == want
		}
		if !found {
			return false
		}
	}
	if !s.Since.IsZero() && r.Timestamp.Before(s.Since) {
		return false
	}
	if !s.Until.IsZero() && !r.Timestamp.Before(s.Until) {
		return false
	}
	return r.Offset >= s.From && (s.To < 0 || r.Offset < s.To)
}

// Original returns the record to publish to topic for the dead letter r:
// its key and value as they were (a nil value, a tombstone, stays nil) and
// its headers without the projector's own (projector-error-*,
// projector-source-* and an earlier projector-redriven-from), plus
// HeaderRedrivenFrom and, when the letter says where it came from,
// project.HeaderOriginalPosition. Correlation and other producers' headers
// are kept, and so is the original position of a letter redriven before.
func Original(r *kgo.Record, topic string) *kgo.Record { return original(r, r, topic) }

// place names where r is: topic/partition/offset.
func place(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// original builds the record to send for the dead letter letter from src,
// the record whose key, value and headers go back: the letter itself, or
// the whole record read again at its source.
func original(letter, src *kgo.Record, topic string) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(src.Headers)+2)
	orig := ""
	for _, h := range src.Headers {
		switch {
		case h.Key == project.HeaderOriginalPosition:
			orig = string(h.Value)
			continue
		case strings.HasPrefix(h.Key, "projector-error-") || strings.HasPrefix(h.Key, "projector-source-") || h.Key == HeaderRedrivenFrom:
			continue
		}
		headers = append(headers, h)
	}
	if orig == "" {
		if p, err := sourcePosition(letter); err == nil {
			orig = p.String()
		}
	}
	if orig != "" {
		headers = append(headers, kgo.RecordHeader{Key: project.HeaderOriginalPosition, Value: []byte(orig)})
	}
	headers = append(headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(place(letter))})
	return &kgo.Record{Topic: topic, Key: src.Key, Value: src.Value, Headers: headers}
}

// sourcePosition reads where the dead letter r came from out of its
// projector-source-* headers.
func sourcePosition(r *kgo.Record) (project.Position, error) {
	topic := header(r, dlq.HeaderSourceTopic)
	partition, perr := strconv.ParseInt(header(r, dlq.HeaderSourcePartition), 10, 32)
	offset, oerr := strconv.ParseInt(header(r, dlq.HeaderSourceOffset), 10, 64)
	if topic == "" || perr != nil || oerr != nil || partition < 0 || offset < 0 {
		return project.Position{}, fmt.Errorf("the dead letter has no valid source position (%s/%s/%s)",
			topic, header(r, dlq.HeaderSourcePartition), header(r, dlq.HeaderSourceOffset))
	}
	p := project.Position{Topic: topic, Partition: int32(partition), Offset: offset}
	if id := header(r, dlq.HeaderSourceTopicID); id != "" {
		var err error
		if p.TopicID, err = project.ParseTopicID(id); err != nil {
			return project.Position{}, fmt.Errorf("the dead letter's %s: %w", dlq.HeaderSourceTopicID, err)
		}
	}
	return p, nil
}

// whole returns the record to send for the dead letter r: Original of r,
// or, when r was cut, Original of the record read at r's source position
// (its key, value and headers whole), once that record is shown to be the
// one dead-lettered: its topic has the letter's topic id (a topic deleted
// and created again restarts its offsets) and its key is the letter's (a
// cut key is a prefix of it). A dry run reads the source too, so that it
// counts what a run would send. An error that wraps ErrGone says the whole
// record is gone for good; any other (a broker that does not answer) may
// pass.
func whole(ctx context.Context, cfg Config, r *kgo.Record) (*kgo.Record, error) {
	truncated := header(r, dlq.HeaderTruncated)
	if truncated == "" {
		return Original(r, cfg.Topic), nil
	}
	if cfg.Source == nil {
		return nil, fmt.Errorf("%w: no source to read cut dead letters from", ErrGone)
	}
	at, err := sourcePosition(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGone, err)
	}
	src, id, err := cfg.Source(ctx, at.Topic, at.Partition, at.Offset)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", at, err)
	}
	if at.TopicID != (project.TopicID{}) && id != at.TopicID {
		return nil, fmt.Errorf("%w: topic %s was created again since the letter (id %s then, %s now): offset %d is another record", ErrGone, at.Topic, at.TopicID, id, at.Offset)
	}
	keyCut := slices.Contains(strings.Split(truncated, ","), "key")
	if !bytes.Equal(src.Key, r.Key) && !(keyCut && bytes.HasPrefix(src.Key, r.Key)) {
		return nil, fmt.Errorf("%w: the record at %s has key %q, the letter %q: another record", ErrGone, at, trimKey(src.Key), trimKey(r.Key))
	}
	return original(r, src, cfg.Topic), nil
}

// trimKey bounds a key quoted in an error.
func trimKey(k []byte) []byte {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Config is one redrive.
type Config struct {
	// DLQTopic is read, Topic written.
	DLQTopic, Topic string
	// Group holds the position in DLQTopic; DefaultGroup names one for each
	// selection. A run that sends is the group's only member while it
	// runs: a second one is refused (ErrBusy).
	Group     string
	Selection Selection
	// DryRun lists what would be sent and sends and commits nothing.
	DryRun bool
	// Batch is how many records are published before the position is
	// committed; a killed redrive sends at most one batch again.
	Batch int
	// Progress is how often a long redrive logs how far it got.
	Progress time.Duration
	// JoinTimeout bounds the wait to become the group's member.
	JoinTimeout time.Duration
	// BusyWait is how long a run waits for another member of the group to
	// go before it refuses with ErrBusy: the member of a redrive that was
	// killed stays until its session (memberSession) times out.
	BusyWait time.Duration
	// Source reads the record at a position of the document topic, and
	// the topic's id, for dead letters that were cut (dlq.HeaderTruncated);
	// an error wrapping ErrGone says the record is gone for good. Nil
	// treats every cut letter as gone.
	Source func(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, project.TopicID, error)
	// Faults, when set, is told FaultAfterPublish after each batch is
	// published and before its position is committed (tests only).
	Faults Faults
}

// Faults injects failures between the steps of a redrive (tests only).
type Faults interface {
	At(ctx context.Context, point string)
}

// FaultAfterPublish is the point between publishing a batch and committing
// past it, where a crash sends the batch again on the next run.
const FaultAfterPublish = "after-redrive-publish"

// DefaultGroup names the position group of one redrive from everything that
// selects its letters, so that a narrower or another redrive never moves a
// position it does not own. The redrive of every letter of some reasons,
// between the default topics, keeps the name it has always had
// (projector-redrive.<reasons> or projector-redrive.all).
func DefaultGroup(cfg Config) string {
	name := "projector-redrive.all"
	if len(cfg.Selection.Reasons) > 0 {
		name = "projector-redrive." + strings.Join(cfg.Selection.Reasons, ",")
	}
	sel := cfg.Selection
	for _, part := range []struct {
		set         bool
		flag, value string
	}{
		{cfg.DLQTopic != DefaultDLQTopic, "dlq-topic", cfg.DLQTopic},
		{cfg.Topic != DefaultTopic, "topic", cfg.Topic},
		{!sel.Since.IsZero(), "since", sel.Since.UTC().Format(time.RFC3339Nano)},
		{!sel.Until.IsZero(), "until", sel.Until.UTC().Format(time.RFC3339Nano)},
		{sel.From > 0, "from-offset", strconv.FormatInt(sel.From, 10)},
		{sel.To >= 0, "to-offset", strconv.FormatInt(sel.To, 10)},
	} {
		if part.set {
			name += "." + part.flag + "=" + part.value
		}
	}
	return name
}

// The topics a redrive reads and writes unless told otherwise.
const (
	DefaultDLQTopic = "documents.dlq"
	DefaultTopic    = "documents"
)

// Report says what a redrive did.
type Report struct {
	// Scanned records were read. Matched were selected and not sent by an
	// earlier run of the group; Sent were published (none in a dry run).
	// Skipped were selected but cut, and their whole record is no longer
	// at its source, or what is there now is another record: no run can
	// send them, and the position passes them. Earlier were selected but
	// sent by an earlier run already, and skipped.
	Scanned, Matched, Sent, Skipped, Earlier int64
}

// The errors of Run that the caller tells apart.
var (
	// ErrForeignGroup is returned, before anything is read or sent, when
	// the position group also holds positions in other topics.
	ErrForeignGroup = errors.New("the redrive's group belongs to another consumer")
	// ErrBusy is returned, before anything is sent, when the group has a
	// member: another redrive of the group runs.
	ErrBusy = errors.New("another redrive of the group is running")
	// ErrPositionFull is returned, before anything is sent, when the
	// group's position cannot hold one more selection's progress.
	ErrPositionFull = errors.New("the group's position is full")
	// ErrGone marks a cut letter whose whole record no run can read again.
	ErrGone = errors.New("the whole record is gone from its source")
)

// Lister receives each selected dead letter of a dry run, and the reason
// it would not be sent (nil: it would be).
type Lister func(r *kgo.Record, skip error)

// Run redrives with clients of opts (the brokers and their security): it
// reads cfg.DLQTopic from the group's position and writes cfg.Topic, each
// record into the partition its original was in. list, in a dry run, is
// given each record that would be sent.
func Run(ctx context.Context, opts []kgo.Opt, log *zap.Logger, cfg Config, list Lister) (Report, error) {
	var rep Report
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = 30 * time.Second
	}
	if cfg.BusyWait <= 0 {
		cfg.BusyWait = memberSession + 5*time.Second
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("projector-redrive"), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	start, end, err := bounds(ctx, adm, cfg.DLQTopic, cfg.Group)
	if err != nil {
		return rep, err
	}
	if err := idleWithin(ctx, adm, cfg.Group, cfg.BusyWait); err != nil {
		return rep, err
	}
	for p, pos := range start {
		// The most this run adds: its own mark, beside every other.
		if _, err := pos.advance(cfg.Selection, end[p], pos.committed).metadata(); err != nil {
			return rep, fmt.Errorf("group %s, partition %d: %w; give the redrive a --group of its own", cfg.Group, p, err)
		}
	}
	target, err := describe(ctx, adm, cfg.Topic)
	if err != nil {
		return rep, err
	}
	letters, err := describe(ctx, adm, cfg.DLQTopic)
	if err != nil {
		return rep, err
	}
	var member *kgo.Client
	if !cfg.DryRun {
		// The run's member of the group: while it is in, a second run of
		// the group finds it and stops, and only it may commit.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		member, err = join(ctx, opts, cfg, cancel)
		if err != nil {
			return rep, err
		}
		defer member.Close()
		if err := idle(ctx, adm, cfg.Group, 1); err != nil {
			return rep, err
		}
	}

	pending := map[int32]bool{}
	consume := map[int32]kgo.Offset{}
	for p, pos := range start {
		if pos.committed < end[p] {
			pending[p] = true
			consume[p] = kgo.NewOffset().At(pos.committed)
		}
	}
	log.Info("redrive starting", zap.String("dlq_topic", cfg.DLQTopic), zap.String("topic", cfg.Topic),
		zap.String("group", cfg.Group), zap.Int("partitions_with_records", len(pending)), zap.Bool("dry_run", cfg.DryRun))
	if len(pending) == 0 {
		return rep, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cfg.DLQTopic: consume})
	defer cl.RemoveConsumePartitions(map[string][]int32{cfg.DLQTopic: keys(consume)})

	// Per partition: how far the run read (next), and the first letter it
	// left unsent (-1: none yet). They give the position committed after
	// each batch, once everything it read is sent.
	next, unsent := map[int32]int64{}, map[int32]int64{}
	for p := range pending {
		next[p], unsent[p] = start[p].committed, -1
	}
	var batch []*kgo.Record
	flush := func() error {
		if cfg.DryRun {
			return nil
		}
		if len(batch) > 0 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return fmt.Errorf("publish to %s: %w", cfg.Topic, err)
			}
			rep.Sent += int64(len(batch))
			batch = batch[:0]
			if cfg.Faults != nil {
				cfg.Faults.At(ctx, FaultAfterPublish)
			}
		}
		positions := map[int32]position{}
		for p, n := range next {
			positions[p] = start[p].advance(cfg.Selection, n, unsent[p])
		}
		return commit(ctx, member, cfg, letters.id, positions)
	}
	lastLog := time.Now()
	for len(pending) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return rep, context.Cause(ctx)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return rep, fmt.Errorf("read %s: %w", cfg.DLQTopic, ferr)
		}
		for _, r := range fetches.Records() {
			if !pending[r.Partition] || r.Offset >= end[r.Partition] || r.Offset < next[r.Partition] {
				continue
			}
			rep.Scanned++
			switch {
			case start[r.Partition].sent(r):
				if cfg.Selection.Match(r) {
					rep.Earlier++
				}
			case cfg.Selection.Match(r):
				rep.Matched++
				out, err := whole(ctx, cfg, r)
				if err != nil && !errors.Is(err, ErrGone) {
					// Not sent, and maybe sendable later: the position
					// stays before it, and the run ends.
					return rep, fmt.Errorf("the cut dead letter %s: %w; run the redrive again once the source answers", place(r), err)
				}
				if cfg.DryRun && list != nil {
					list(r, err)
				}
				if err != nil {
					rep.Skipped++
					log.Warn("a cut dead letter whose whole record is gone from its source; no run can send it", zap.Int32("partition", r.Partition),
						zap.Int64("offset", r.Offset), zap.Error(err))
					break
				}
				out.Partition = placeIn(out, cfg.Topic, target)
				batch = append(batch, out)
			default:
				if unsent[r.Partition] < 0 {
					unsent[r.Partition] = r.Offset
				}
			}
			next[r.Partition] = r.Offset + 1
			if r.Offset+1 >= end[r.Partition] {
				delete(pending, r.Partition)
			}
			if len(batch) >= cfg.Batch {
				if err := flush(); err != nil {
					return rep, err
				}
			}
		}
		if cfg.Progress > 0 && time.Since(lastLog) >= cfg.Progress {
			log.Info("redrive progress", zap.Int64("scanned", rep.Scanned), zap.Int64("matched", rep.Matched),
				zap.Int64("sent", rep.Sent), zap.Int("partitions_left", len(pending)))
			lastLog = time.Now()
		}
	}
	return rep, flush()
}

// topicLayout is the document topic as the redrive found it.
type topicLayout struct {
	id         project.TopicID
	partitions int
}

// describe returns the layout of topic, which must exist.
func describe(ctx context.Context, adm *kadm.Client, topic string) (topicLayout, error) {
	topics, err := adm.ListTopics(ctx, topic)
	if err == nil {
		err = topics.Error()
	}
	if err != nil {
		return topicLayout{}, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	t := topics[topic]
	return topicLayout{id: project.TopicID(t.ID), partitions: len(t.Partitions)}, nil
}

// placeIn returns the partition of topic to send out to: the one its
// original was in, where the projector judges it at its original place
// (a record in another partition is judged where it lands); the one its
// key hashes to, as any producer's, when the original was in another
// topic, or in a topic of that name deleted since, or in a partition the
// topic no longer has.
func placeIn(out *kgo.Record, topic string, layout topicLayout) int32 {
	if p, err := project.ParsePosition(header(out, project.HeaderOriginalPosition)); err == nil && p.Topic == topic &&
		int(p.Partition) < layout.partitions && (p.TopicID == (project.TopicID{}) || p.TopicID == layout.id) {
		return p.Partition
	}
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(out, layout.partitions))
}

// join makes a client the group's member, and returns once the group
// gave it its generation. A rebalance that takes a partition from it
// means another member joined: it cancels the run with ErrBusy.
func join(ctx context.Context, opts []kgo.Opt, cfg Config, cancel context.CancelCauseFunc) (*kgo.Client, error) {
	busy := func(context.Context, *kgo.Client, map[string][]int32) {
		cancel(fmt.Errorf("%w: another member joined group %s while this redrive ran; stopped (what was sent before is committed)", ErrBusy, cfg.Group))
	}
	member, err := kgo.NewClient(append(opts, kgo.ClientID("projector-redrive-member"),
		kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.DLQTopic), kgo.DisableAutoCommit(), kgo.SessionTimeout(memberSession),
		kgo.OnPartitionsRevoked(busy), kgo.OnPartitionsLost(busy))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	// The member only holds the group; the run reads with its own client.
	member.PauseFetchTopics(cfg.DLQTopic)
	deadline := time.Now().Add(cfg.JoinTimeout)
	for {
		if _, gen := member.GroupMetadata(); gen > 0 {
			return member, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			member.Close()
			return nil, fmt.Errorf("join group %s within %s: %w", cfg.Group, cfg.JoinTimeout, errors.Join(ctx.Err(), errors.New("no generation")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memberSession is the session timeout of a run's member: short, so that
// the member of a run that was killed leaves the group soon (the brokers
// accept 6 s and more by default).
const memberSession = 10 * time.Second

// idleWithin waits up to wait for group to have no member, then refuses
// with ErrBusy.
func idleWithin(ctx context.Context, adm *kadm.Client, group string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := idle(ctx, adm, group, 0)
		if !errors.Is(err, ErrBusy) || time.Now().After(deadline) {
			return err
		}
		if err := retry.Sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// idle refuses with ErrBusy when group has more members than allowed: none
// before this run joined, itself alone after.
func idle(ctx context.Context, adm *kadm.Client, group string, allowed int) error {
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := groups[group]
	if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) {
		return nil
	}
	if g.Err != nil {
		return fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	if len(g.Members) <= allowed {
		return nil
	}
	var who []string
	for _, m := range g.Members {
		who = append(who, m.ClientID+" on "+m.ClientHost)
	}
	slices.Sort(who)
	return fmt.Errorf("%w: group %s has %d members (%s); wait for it to end, or give this one another --group",
		ErrBusy, group, len(g.Members)-allowed, strings.Join(who, ", "))
}

// commit commits the positions as the group's member, with the marks in
// each partition's metadata; the broker refuses it from a member that is
// no longer the group's.
func commit(ctx context.Context, member *kgo.Client, cfg Config, topicID project.TopicID, positions map[int32]position) error {
	memberID, generation := member.GroupMetadata()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = cfg.Group, memberID, generation
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic, t.TopicID = cfg.DLQTopic, topicID // by name before v10, by id since
	for p, pos := range positions {
		md, err := pos.metadata()
		if err != nil {
			return fmt.Errorf("group %s, partition %d: %w", cfg.Group, p, err)
		}
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, pos.committed, -1, &md
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, member)
	if err != nil {
		return fmt.Errorf("commit the position of group %s: %w", cfg.Group, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("commit the position of group %s, partition %d: %w", cfg.Group, rp.Partition, err)
			}
		}
	}
	return nil
}

// bounds returns, per partition of topic, where the group's position is
// (the log start when it has none, or when retention deleted the letters
// below it) and the end offset now.
func bounds(ctx context.Context, adm *kadm.Client, topic, group string) (start map[int32]position, end map[int32]int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list the end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, nil, fmt.Errorf("list the end offsets of %s: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list the start offsets of %s: %w", topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// Some brokers say so of a group that never committed: the first
		// redrive of a selection.
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fetch the position of group %s: %w", group, err)
	}
	var others []string
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic && !slices.Contains(others, o.Topic) {
			others = append(others, o.Topic)
		}
	})
	if len(others) > 0 {
		slices.Sort(others)
		return nil, nil, fmt.Errorf("%w: group %s holds positions in %s, so it is another consumer's (the projector's own?); "+
			"a redrive committing there would move them, give it a group of its own", ErrForeignGroup, group, strings.Join(others, ", "))
	}
	start, end = map[int32]position{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		start[o.Partition] = position{}
	})
	starts.Each(func(o kadm.ListedOffset) { start[o.Partition] = position{committed: o.Offset} })
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Topic != topic || o.Err != nil || o.At < 0 {
			return
		}
		// A position below the log start was deleted by retention.
		start[o.Partition] = parsePosition(max(o.At, start[o.Partition].committed), o.Metadata).pruned()
	})
	return start, end, nil
}

func keys(m map[int32]kgo.Offset) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	return out
}
