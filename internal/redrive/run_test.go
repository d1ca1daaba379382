package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/dlq"
	"github.com/projector/projector/internal/project"
)

// dlqCluster is a fake Kafka cluster whose dead-letter topic holds reasons
// in order, one letter each, in one partition, and whose document topic
// has partitions partitions (1 unless told).
type dlqCluster struct {
	t     *testing.T
	addrs []string
}

func newDLQCluster(t *testing.T, reasons ...string) *dlqCluster {
	t.Helper()
	return newDLQClusterOf(t, 1, reasons...)
}

func newDLQClusterOf(t *testing.T, partitions int32, reasons ...string) *dlqCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, DefaultDLQTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d := &dlqCluster{t: t, addrs: c.ListenAddrs()}
	cl := d.client()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, nil, DefaultTopic); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i, reason := range reasons {
		recs = append(recs, letter(i, reason))
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return d
}

// letter is the i-th dead letter: doc-i, dead-lettered for reason at
// documents/0/i.
func letter(i int, reason string) *kgo.Record {
	return &kgo.Record{Topic: DefaultDLQTopic, Key: []byte("doc-" + strconv.Itoa(i)), Value: []byte("{}"), Headers: []kgo.RecordHeader{
		{Key: dlq.HeaderReason, Value: []byte(reason)},
		{Key: dlq.HeaderSourceTopic, Value: []byte(DefaultTopic)},
		{Key: dlq.HeaderSourcePartition, Value: []byte("0")},
		{Key: dlq.HeaderSourceOffset, Value: []byte(strconv.Itoa(i))},
	}}
}

func (d *dlqCluster) client() *kgo.Client {
	d.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.addrs...), kgo.ProducerLinger(0))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(cl.Close)
	return cl
}

// redrive runs one redrive of sel, in group (DefaultGroup when empty).
func (d *dlqCluster) redrive(ctx context.Context, group string, sel Selection, faults Faults) (Report, error) {
	d.t.Helper()
	return d.run(ctx, Config{Group: group, Selection: sel, Faults: faults}, nil)
}

// run runs a redrive of cfg between the default topics, two letters a batch.
func (d *dlqCluster) run(ctx context.Context, cfg Config, list Lister) (Report, error) {
	d.t.Helper()
	cfg.DLQTopic, cfg.Topic, cfg.Batch = DefaultDLQTopic, DefaultTopic, 2
	if cfg.BusyWait == 0 {
		cfg.BusyWait = time.Millisecond // a test's second run is refused at once
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup(cfg)
	}
	return Run(ctx, []kgo.Opt{kgo.SeedBrokers(d.addrs...)}, zap.NewNop(), cfg, list)
}

// published returns how many records the document topic holds.
func (d *dlqCluster) published() int64 {
	d.t.Helper()
	ends, err := kadm.NewClient(d.client()).ListEndOffsets(context.Background(), DefaultTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		d.t.Fatal(err)
	}
	o, _ := ends.Lookup(DefaultTopic, 0)
	return o.Offset
}

// Issue 23: a narrowed redrive sent 3 of 10 letters and committed past all
// ten, so the wide one that followed in the same group sent none. Now the
// position stops past the last letter sent, and the default groups of the
// two selections differ.
func TestNarrowRedriveLeavesTheRestToTheWide(t *testing.T) {
	reasons := make([]string, 10)
	for i := range reasons {
		reasons[i] = "store_rejected"
	}
	narrow := Selection{Reasons: []string{"store_rejected"}, To: 3}
	wide := Selection{Reasons: []string{"store_rejected"}, To: -1}
	ctx := context.Background()

	t.Run("one group", func(t *testing.T) {
		d := newDLQCluster(t, reasons...)
		for _, step := range []struct {
			sel  Selection
			want int64
		}{{narrow, 3}, {wide, 7}, {wide, 0}} {
			rep, err := d.redrive(ctx, "shared", step.sel, nil)
			if err != nil || rep.Sent != step.want {
				t.Fatalf("redrive sent %d (%v), want %d", rep.Sent, err, step.want)
			}
		}
		if got := d.published(); got != 10 {
			t.Errorf("document topic holds %d records, want each letter once", got)
		}
	})
	t.Run("default groups", func(t *testing.T) {
		d := newDLQCluster(t, reasons...)
		for _, step := range []struct {
			sel  Selection
			want int64
		}{{narrow, 3}, {narrow, 0}, {wide, 10}, {wide, 0}} {
			rep, err := d.redrive(ctx, "", step.sel, nil)
			if err != nil || rep.Sent != step.want {
				t.Fatalf("redrive sent %d (%v), want %d", rep.Sent, err, step.want)
			}
		}
	})
}

// Issue 28: with a shared group, a letter of another reason before the
// last one sent was passed by the position and never sent. Now the
// position stops at the first letter left unsent, and its marks keep a
// rerun from sending anything twice.
func TestNoLetterIsLostToAnotherSelection(t *testing.T) {
	d := newDLQCluster(t, "not_json", "too_large", "not_json", "not_json")
	ctx := context.Background()
	tooLarge, notJSON := Selection{Reasons: []string{"too_large"}, To: -1}, Selection{Reasons: []string{"not_json"}, To: -1}
	for _, step := range []struct {
		sel  Selection
		want int64
	}{{tooLarge, 1}, {tooLarge, 0}, {notJSON, 3}, {notJSON, 0}, {tooLarge, 0}, {Selection{To: -1}, 0}} {
		if rep, err := d.redrive(ctx, "g", step.sel, nil); err != nil || rep.Sent != step.want {
			t.Fatalf("redrive of %v in the shared group sent %d (%v), want %d", step.sel.Reasons, rep.Sent, err, step.want)
		}
	}
	if got := d.published(); got != 4 {
		t.Errorf("document topic holds %d records, want each of the 4 letters once", got)
	}
}

// cancelAt ends a redrive at one fault point, as a kill would.
type cancelAt struct {
	point  string
	cancel context.CancelFunc
}

func (c cancelAt) At(_ context.Context, point string) {
	if point == c.point {
		c.cancel()
	}
}

// A redrive stopped between publishing a batch and committing past it
// sends that batch again on the next run, and nothing else twice.
func TestStoppedRedriveSendsItsLastBatchAgain(t *testing.T) {
	d := newDLQCluster(t, "store_rejected", "store_rejected", "store_rejected", "store_rejected", "store_rejected")
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := d.redrive(ctx, "g", Selection{To: -1}, cancelAt{point: FaultAfterPublish, cancel: cancel})
	if err == nil || rep.Sent != 2 {
		t.Fatalf("stopped redrive: sent %d, error %v; want 2 sent (one batch) and an error", rep.Sent, err)
	}
	rep, err = d.redrive(context.Background(), "g", Selection{To: -1}, nil)
	if err != nil || rep.Sent != 5 {
		t.Fatalf("rerun sent %d (%v), want all 5: the first batch was never committed", rep.Sent, err)
	}
	if got := d.published(); got != 7 {
		t.Errorf("document topic holds %d records, want 7 (one batch twice)", got)
	}
}

// The projector's own group, given as the redrive's, is refused before
// anything is sent: committing dead-letter positions there is not the
// redrive's to do.
func TestForeignGroupRefused(t *testing.T) {
	d := newDLQCluster(t, "too_large")
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: DefaultTopic, Partition: 0, At: 0, LeaderEpoch: -1})
	if err := kadm.NewClient(d.client()).CommitAllOffsets(context.Background(), "projector", offsets); err != nil {
		t.Fatal(err)
	}
	rep, err := d.redrive(context.Background(), "projector", Selection{To: -1}, nil)
	if !errors.Is(err, ErrForeignGroup) || rep.Sent != 0 {
		t.Fatalf("redrive in the projector's group: sent %d, error %v; want nothing sent and ErrForeignGroup", rep.Sent, err)
	}
	if got := d.published(); got != 0 {
		t.Errorf("document topic holds %d records, want none", got)
	}
}

// Issue 28: a letter placed by its key lands, after partitions were added
// to the document topic, in another partition than its original, where the
// projector judges it at its new offset. Each goes to its original's
// partition now.
func TestLettersGoToTheirOriginalPartition(t *testing.T) {
	reasons := make([]string, 12)
	for i := range reasons {
		reasons[i] = "store_rejected"
	}
	d := newDLQClusterOf(t, 4, reasons...) // the originals were all in partition 0
	if rep, err := d.redrive(context.Background(), "", Selection{To: -1}, nil); err != nil || rep.Sent != 12 {
		t.Fatalf("redrive sent %d (%v), want 12", rep.Sent, err)
	}
	ends, err := kadm.NewClient(d.client()).ListEndOffsets(context.Background(), DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if want := map[int32]int64{0: 12}[o.Partition]; o.Offset != want {
			t.Errorf("partition %d of the document topic holds %d records, want %d", o.Partition, o.Offset, want)
		}
	})
}

// cutLetterAt is a letter of documents/0/i cut to fit the dead-letter topic.
func cutLetterAt(i int) *kgo.Record {
	r := letter(i, "too_large")
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: dlq.HeaderTruncated, Value: []byte("value")})
	return r
}

// Issue 28: a dry run did not read the source of cut letters, so it
// counted one whose whole record is gone as one it would send. Now it
// counts what a run sends, and says which it would skip.
func TestDryRunCountsCutLetters(t *testing.T) {
	d := newDLQCluster(t)
	if err := d.client().ProduceSync(context.Background(), cutLetterAt(0), cutLetterAt(1), letter(2, "too_large")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	source := func(_ context.Context, topic string, partition int32, offset int64) (*kgo.Record, project.TopicID, error) {
		if offset == 0 {
			return nil, project.TopicID{}, fmt.Errorf("%w: retention deleted it", ErrGone)
		}
		return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Key: []byte("doc-" + strconv.FormatInt(offset, 10)), Value: []byte("{}")}, project.TopicID{}, nil
	}
	var listed []string
	list := func(r *kgo.Record, skip error) { listed = append(listed, fmt.Sprint(r.Offset, " ", skip != nil)) }
	dry, err := d.run(context.Background(), Config{Selection: Selection{To: -1}, DryRun: true, Source: source}, list)
	if err != nil {
		t.Fatal(err)
	}
	run, err := d.run(context.Background(), Config{Selection: Selection{To: -1}, Source: source}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Matched-dry.Skipped != run.Sent || dry.Skipped != 1 || run.Sent != 2 {
		t.Errorf("dry run: %d would be sent, %d skipped; the run sent %d: want 2, 1 and 2", dry.Matched-dry.Skipped, dry.Skipped, run.Sent)
	}
	if want := []string{"0 true", "1 false", "2 false"}; !slices.Equal(listed, want) {
		t.Errorf("dry run listed %v, want %v (offset, skipped)", listed, want)
	}
	// A source that does not answer is no reason to pass the letter: the
	// run stops before it, and a rerun sends it.
	d = newDLQCluster(t)
	if err := d.client().ProduceSync(context.Background(), letter(0, "too_large"), cutLetterAt(1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	down := func(context.Context, string, int32, int64) (*kgo.Record, project.TopicID, error) {
		return nil, project.TopicID{}, errors.New("dial tcp: connection refused")
	}
	if _, err := d.run(context.Background(), Config{Selection: Selection{To: -1}, Source: down}, nil); err == nil {
		t.Fatal("a redrive whose source does not answer succeeded")
	}
	if rep, err := d.run(context.Background(), Config{Selection: Selection{To: -1}, Source: source}, nil); err != nil || rep.Sent != 2 || rep.Skipped != 0 {
		t.Errorf("the rerun sent %d, skipped %d (%v); want both letters sent, the cut one whole", rep.Sent, rep.Skipped, err)
	}
}

// blockAt holds a redrive at one fault point until released.
type blockAt struct {
	point             string
	once              *sync.Once
	reached, released chan struct{}
}

func (b blockAt) At(_ context.Context, point string) {
	if point == b.point {
		b.once.Do(func() { close(b.reached) })
		<-b.released
	}
}

// Issue 28: nothing stopped two redrives of one group at once. The run in
// progress is the group's member, and a second run finds it and stops
// before it sends anything.
func TestSecondRunOfAGroupIsRefused(t *testing.T) {
	d := newDLQCluster(t, "store_rejected", "store_rejected", "store_rejected", "store_rejected")
	hold := blockAt{point: FaultAfterPublish, once: &sync.Once{}, reached: make(chan struct{}), released: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		_, err := d.redrive(context.Background(), "g", Selection{To: -1}, hold)
		first <- err
	}()
	<-hold.reached
	before := d.published()
	rep, err := d.redrive(context.Background(), "g", Selection{To: -1}, nil)
	if !errors.Is(err, ErrBusy) || rep.Sent != 0 {
		t.Errorf("a second run of the group: sent %d, error %v; want nothing sent and ErrBusy", rep.Sent, err)
	}
	if got := d.published(); got != before {
		t.Errorf("the document topic went from %d to %d records during the refused run", before, got)
	}
	close(hold.released)
	if err := <-first; err != nil {
		t.Fatalf("the first run: %v", err)
	}
	if got := d.published(); got != 4 {
		t.Errorf("document topic holds %d records, want the 4 letters once", got)
	}
}
