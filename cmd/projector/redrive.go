package main

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
	"go.uber.org/zap"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/fault"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/redrive"
)

// redriveCommand publishes chosen dead letters back to the document topic.
func redriveCommand(ctx context.Context, args []string, e env) error {
	var (
		lf                logFlags
		kf                kafkaFlags
		cfg               redrive.Config
		reasons           string
		since, until      string
		fromOff, toOff    int64
		progress, timeout time.Duration
	)
	fs := newFlagSet("redrive", "redrive [--reason R[,R...]] [--since T] [--until T] [--from-offset N] [--to-offset N] [--dry-run] [flags]", e)
	lf.register(fs)
	kf.register(fs)
	fs.StringVar(&cfg.DLQTopic, "dlq-topic", redrive.DefaultDLQTopic, "dead-letter topic to read")
	fs.StringVar(&cfg.Topic, "topic", redrive.DefaultTopic, "topic to publish the dead letters back to")
	fs.StringVar(&cfg.Group, "group", "", "consumer group that keeps this redrive's position in the dead-letter topic, so that a rerun sends nothing twice (default: named from the whole selection, projector-redrive.<reasons>[.<flag>=<value>...], or projector-redrive.all); never the projector's own group")
	fs.StringVar(&reasons, "reason", "", "comma-separated projector-error-reason values to send back (default: every reason)")
	fs.StringVar(&since, "since", "", "only dead letters written at or after this RFC 3339 time")
	fs.StringVar(&until, "until", "", "only dead letters written before this RFC 3339 time")
	fs.Int64Var(&fromOff, "from-offset", 0, "only dead letters at or after this offset of their dead-letter partition")
	fs.Int64Var(&toOff, "to-offset", -1, "only dead letters before this offset of their dead-letter partition (-1: no bound)")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "list what would be sent, one line a record, and send and commit nothing")
	fs.IntVar(&cfg.Batch, "batch", 1000, "records published before the position is committed; a killed redrive sends at most this many again")
	fs.DurationVar(&progress, "progress", 10*time.Second, "how often a long redrive logs how far it got")
	fs.DurationVar(&timeout, "timeout", 30*time.Minute, "how long the whole redrive may take")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	sel, err := parseSelection(reasons, since, until, fromOff, toOff)
	if err != nil {
		return usageError(err)
	}
	cfg.Selection, cfg.Progress = sel, progress
	if cfg.Batch <= 0 {
		return usageError(fmt.Errorf("--batch %d: want at least 1", cfg.Batch))
	}
	if cfg.Group == "" {
		cfg.Group = redrive.DefaultGroup(cfg)
	}
	faults, err := fault.FromEnv(e.getenv)
	if err != nil {
		return usageError(err)
	}
	if faults != nil {
		cfg.Faults = faults
	}
	log, err := lf.logger(e)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	opts, err := kf.opts(log)
	if err != nil {
		return usageError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg.Source = func(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, project.TopicID, error) {
		return readAt(ctx, opts, topic, partition, offset)
	}
	list := func(r *kgo.Record, skip error) { fmt.Fprintln(e.stdout, dryRunLine(r, skip)) }
	rep, err := redrive.Run(ctx, opts, log.With(zap.String("component", "redrive")), cfg, list)
	switch {
	case errors.Is(err, redrive.ErrForeignGroup), errors.Is(err, redrive.ErrPositionFull):
		return usageError(err)
	case errors.Is(err, redrive.ErrBusy):
		return &exitError{code: exitGroupActive, err: err}
	}
	verb, n := "sent", rep.Sent
	if cfg.DryRun {
		verb, n = "would send", rep.Matched-rep.Skipped
	}
	fmt.Fprintf(e.stdout, "%s %d of %d dead letters read from %s to %s (group %s)\n", verb, n, rep.Scanned, cfg.DLQTopic, cfg.Topic, cfg.Group)
	if rep.Earlier > 0 {
		fmt.Fprintf(e.stdout, "passed %d selected dead letters that an earlier redrive of the group sent\n", rep.Earlier)
	}
	if rep.Skipped > 0 {
		what := "skipped"
		if cfg.DryRun {
			what = "would skip"
		}
		fmt.Fprintf(e.stdout, "%s %d cut dead letters whose whole record is no longer at its source offset (see the log)\n", what, rep.Skipped)
	}
	return err
}

// dryRunLine describes a dead letter a redrive would send: where it is,
// why it failed, and where its event first was. A letter redriven and
// dead-lettered again names its redriven copy as source and keeps the
// first place in original=, which is where the projector judges it: two
// lines with one original are one event. A cut letter whose whole record
// is gone (skip) would be skipped, and the line says why.
func dryRunLine(r *kgo.Record, skip error) string {
	h := map[string]string{}
	for _, hd := range r.Headers {
		h[hd.Key] = string(hd.Value)
	}
	value := strconv.Itoa(len(r.Value)) + " bytes"
	if r.Value == nil {
		value = "tombstone"
	}
	verb := "would send"
	if skip != nil {
		verb = "would skip"
	}
	line := fmt.Sprintf("%s partition=%d offset=%d reason=%s key=%q source=%s/%s/%s", verb,
		r.Partition, r.Offset, h[dlq.HeaderReason], r.Key,
		h[dlq.HeaderSourceTopic], h[dlq.HeaderSourcePartition], h[dlq.HeaderSourceOffset])
	if orig := h[project.HeaderOriginalPosition]; orig != "" {
		line += " original=" + orig
	}
	line += " value=" + value
	if skip != nil {
		line += " (" + skip.Error() + ")"
	}
	return line
}

// readAt reads the record at topic/partition/offset, and the topic's id,
// with a client of its own, for a dead letter that was cut: an error when
// the topic no longer keeps it (retention deleted it, or compaction).
func readAt(ctx context.Context, opts []kgo.Opt, topic string, partition int32, offset int64) (*kgo.Record, project.TopicID, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaTimeout)
	defer cancel()
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("projector-redrive-source"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()))...)
	if err != nil {
		return nil, project.TopicID{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err == nil {
		err = topics.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, project.TopicID{}, fmt.Errorf("%w: topic %s no longer exists", redrive.ErrGone, topic)
	}
	if err != nil {
		return nil, project.TopicID{}, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	id := project.TopicID(topics[topic].ID)
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, id, err
		}
		if err := fetches.Err(); errors.Is(err, kerr.OffsetOutOfRange) {
			return nil, id, fmt.Errorf("%w: the topic no longer holds offset %d (retention deleted it): %w", redrive.ErrGone, offset, err)
		} else if err != nil {
			return nil, id, err
		}
		for _, r := range fetches.Records() {
			if r.Offset == offset {
				return r, id, nil
			}
			if r.Offset > offset {
				return nil, id, fmt.Errorf("%w: the topic no longer holds offset %d (compacted)", redrive.ErrGone, offset)
			}
		}
	}
}

// parseSelection checks the selection flags of redrive.
func parseSelection(reasons, since, until string, from, to int64) (redrive.Selection, error) {
	var sel redrive.Selection
	for _, r := range strings.Split(reasons, ",") {
		if r = strings.TrimSpace(r); r != "" && !slices.Contains(sel.Reasons, r) {
			sel.Reasons = append(sel.Reasons, r)
		}
	}
	slices.Sort(sel.Reasons)
	for _, t := range []struct {
		flag, value string
		into        *time.Time
	}{{"--since", since, &sel.Since}, {"--until", until, &sel.Until}} {
		if t.value == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, t.value)
		if err != nil {
			return sel, fmt.Errorf("%s %q: want an RFC 3339 time such as 2024-05-01T12:00:00Z", t.flag, t.value)
		}
		*t.into = at
	}
	if from < 0 || (to >= 0 && to <= from) {
		return sel, fmt.Errorf("--from-offset %d, --to-offset %d: want 0 <= from < to, or to -1", from, to)
	}
	sel.From, sel.To = from, to
	return sel, nil
}
