package redrive

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/dlq"
)

// dlqCluster is a fake Kafka cluster whose dead-letter topic holds reasons
// in order, one letter each, in one partition.
type dlqCluster struct {
	t     *testing.T
	addrs []string
}

func newDLQCluster(t *testing.T, reasons ...string) *dlqCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, DefaultDLQTopic, DefaultTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d := &dlqCluster{t: t, addrs: c.ListenAddrs()}
	cl := d.client()
	var recs []*kgo.Record
	for i, reason := range reasons {
		recs = append(recs, &kgo.Record{Topic: DefaultDLQTopic, Key: []byte("doc-" + strconv.Itoa(i)), Value: []byte("{}"), Headers: []kgo.RecordHeader{
			{Key: dlq.HeaderReason, Value: []byte(reason)},
			{Key: dlq.HeaderSourceTopic, Value: []byte(DefaultTopic)},
			{Key: dlq.HeaderSourcePartition, Value: []byte("0")},
			{Key: dlq.HeaderSourceOffset, Value: []byte(strconv.Itoa(i))},
		}})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return d
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
	cfg := Config{DLQTopic: DefaultDLQTopic, Topic: DefaultTopic, Group: group, Selection: sel, Batch: 2, Faults: faults}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup(cfg)
	}
	return Run(ctx, d.client(), zap.NewNop(), cfg, nil)
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

// A letter of a reason not selected is never passed by the position of a
// selection that sent nothing after it.
func TestPositionStopsPastTheLastLetterSent(t *testing.T) {
	d := newDLQCluster(t, "not_json", "too_large", "not_json", "not_json")
	ctx := context.Background()
	if rep, err := d.redrive(ctx, "g", Selection{Reasons: []string{"too_large"}, To: -1}, nil); err != nil || rep.Sent != 1 {
		t.Fatalf("too_large redrive sent %d (%v), want 1", rep.Sent, err)
	}
	if rep, err := d.redrive(ctx, "g", Selection{Reasons: []string{"not_json"}, To: -1}, nil); err != nil || rep.Sent != 2 {
		t.Fatalf("not_json redrive in the same group sent %d (%v), want the 2 after the too_large letter", rep.Sent, err)
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
