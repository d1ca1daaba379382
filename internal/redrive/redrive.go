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
// added, plus project.HeaderOriginalPosition: the projector judges a
// redriven record at its first place in the log, so it has the effect its
// original would have had there, however late and however often it comes
// back. The position committed in each partition is past the last letter
// sent, never past one the selection did not send, so a group shared by a
// narrow and a wide selection loses nothing to the narrow one. A redrive
// killed between publishing and committing sends those records again, which
// the projector takes as the redelivery it is. A dead letter cut to fit the
// dead-letter topic (dlq.HeaderTruncated) is sent whole: its record is read
// again at its source position, once its topic id and key show it is the
// same record.
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
	"go.uber.org/zap"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
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

// position names where r is: topic/partition/offset.
func position(r *kgo.Record) string {
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
	headers = append(headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(position(letter))})
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
// cut key is a prefix of it). A dry run reads nothing.
func whole(ctx context.Context, cfg Config, r *kgo.Record) (*kgo.Record, error) {
	truncated := header(r, dlq.HeaderTruncated)
	if truncated == "" || cfg.DryRun {
		return Original(r, cfg.Topic), nil
	}
	if cfg.Source == nil {
		return nil, errors.New("no source to read cut dead letters from")
	}
	at, err := sourcePosition(r)
	if err != nil {
		return nil, err
	}
	src, id, err := cfg.Source(ctx, at.Topic, at.Partition, at.Offset)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", at, err)
	}
	if at.TopicID != (project.TopicID{}) && id != at.TopicID {
		return nil, fmt.Errorf("topic %s was created again since the letter (id %s then, %s now): offset %d is another record", at.Topic, at.TopicID, id, at.Offset)
	}
	keyCut := slices.Contains(strings.Split(truncated, ","), "key")
	if !bytes.Equal(src.Key, r.Key) && !(keyCut && bytes.HasPrefix(src.Key, r.Key)) {
		return nil, fmt.Errorf("the record at %s has key %q, the letter %q: another record", at, trimKey(src.Key), trimKey(r.Key))
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
	// Group holds the committed position in DLQTopic; DefaultGroup names
	// one for each selection.
	Group     string
	Selection Selection
	// DryRun lists what would be sent and sends and commits nothing.
	DryRun bool
	// Batch is how many records are published before the position is
	// committed; a killed redrive sends at most one batch again.
	Batch int
	// Progress is how often a long redrive logs how far it got.
	Progress time.Duration
	// Source reads the record at a position of the document topic, and
	// the topic's id, for dead letters that were cut (dlq.HeaderTruncated);
	// nil skips them.
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
	// Scanned records were read, Matched were selected, Sent were
	// published (none in a dry run). Skipped were selected but cut, and
	// their whole record could not be read at its source any more, or what
	// is there now is another record; the position does not pass them
	// unless a later letter of their partition is sent.
	Scanned, Matched, Sent, Skipped int64
}

// ErrForeignGroup is returned, before anything is read or sent, when the
// position group also holds positions in other topics.
var ErrForeignGroup = errors.New("the redrive's group belongs to another consumer")

// Lister receives each selected dead letter of a dry run.
type Lister func(r *kgo.Record)

// Run redrives with cl, a client without consume options, which it uses
// to read cfg.DLQTopic and write cfg.Topic. list, in a dry run, is given
// each record that would be sent.
func Run(ctx context.Context, cl *kgo.Client, log *zap.Logger, cfg Config, list Lister) (Report, error) {
	var rep Report
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	adm := kadm.NewClient(cl)
	start, end, err := bounds(ctx, adm, cfg.DLQTopic, cfg.Group)
	if err != nil {
		return rep, err
	}
	pending := map[int32]bool{}
	consume := map[int32]kgo.Offset{}
	for p, at := range start {
		if at < end[p] {
			pending[p] = true
			consume[p] = kgo.NewOffset().At(at)
		}
	}
	log.Info("redrive starting", zap.String("dlq_topic", cfg.DLQTopic), zap.String("topic", cfg.Topic),
		zap.String("group", cfg.Group), zap.Int("partitions_with_records", len(pending)), zap.Bool("dry_run", cfg.DryRun))
	if len(pending) == 0 {
		return rep, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cfg.DLQTopic: consume})
	defer cl.RemoveConsumePartitions(map[string][]int32{cfg.DLQTopic: keys(consume)})

	// sent is, per partition, the position past the last letter sent;
	// committed after each batch, it never passes a letter left unsent.
	sent := kadm.Offsets{}
	var batch []*kgo.Record
	flush := func() error {
		if cfg.DryRun || len(batch) == 0 {
			batch = batch[:0]
			return nil
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("publish to %s: %w", cfg.Topic, err)
		}
		rep.Sent += int64(len(batch))
		batch = batch[:0]
		if cfg.Faults != nil {
			cfg.Faults.At(ctx, FaultAfterPublish)
		}
		if err := adm.CommitAllOffsets(ctx, cfg.Group, sent); err != nil {
			return fmt.Errorf("commit the position of group %s: %w", cfg.Group, err)
		}
		return nil
	}
	lastLog := time.Now()
	for len(pending) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return rep, fmt.Errorf("read %s: %w", cfg.DLQTopic, ferr)
		}
		for _, r := range fetches.Records() {
			if !pending[r.Partition] || r.Offset >= end[r.Partition] {
				continue
			}
			rep.Scanned++
			if cfg.Selection.Match(r) {
				rep.Matched++
				if cfg.DryRun && list != nil {
					list(r)
				}
				out, err := whole(ctx, cfg, r)
				if err != nil {
					rep.Skipped++
					log.Warn("a cut dead letter whose whole record is gone from its source; not sent", zap.Int32("partition", r.Partition),
						zap.Int64("offset", r.Offset), zap.Error(err))
				} else {
					batch = append(batch, out)
					sent.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Offset + 1, LeaderEpoch: -1})
				}
			}
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

// bounds returns, per partition of topic, where the group's position is
// (the log start when it has none) and the end offset now.
func bounds(ctx context.Context, adm *kadm.Client, topic, group string) (start, end map[int32]int64, err error) {
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
	start, end = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		start[o.Partition] = 0
	})
	starts.Each(func(o kadm.ListedOffset) { start[o.Partition] = o.Offset })
	committed.Each(func(o kadm.OffsetResponse) {
		// A position below the log start was deleted by retention.
		if o.Topic == topic && o.Err == nil && o.At > start[o.Partition] {
			start[o.Partition] = o.At
		}
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
