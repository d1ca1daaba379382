package replay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseReplayTarget(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want Target
		ok   bool
	}{
		{"earliest", Target{Earliest: true, Offset: -1}, true},
		{"0", Target{Offset: 0}, true},
		{"1500", Target{Offset: 1500}, true},
		{"2024-05-01T12:00:00Z", Target{Offset: -1, At: at}, true},
		{"2024-05-01T14:00:00+02:00", Target{Offset: -1, At: at}, true},
		{"", Target{}, false},
		{"-1", Target{}, false},
		{"latest", Target{}, false},
		{"2024-05-01", Target{}, false},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		if (err == nil) != tt.ok || got.Earliest != tt.want.Earliest || got.Offset != tt.want.Offset || !got.At.Equal(tt.want.At) {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParsePartitions(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "[]", true},
		{"0,2,5", "[0 2 5]", true},
		{" 1 , 1 ", "[1]", true},
		{"0,x", "[]", false},
		{"-1", "[]", false},
		{"0,,1", "[]", false},
	}
	for _, tt := range tests {
		got, err := ParsePartitions(tt.in)
		if (err == nil) != tt.ok || (tt.ok && fmt.Sprint(got) != tt.want) {
			t.Errorf("ParsePartitions(%q) = %v, %v; want %s, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// topic is a fake cluster whose topic "documents" has two partitions of
// ten records each, keys k0..k4 twice, and whose group "projector" has
// committed offsets 10 and 6.
type topic struct {
	t    *testing.T
	opts []kgo.Opt
	adm  *kadm.Client
}

func newTopic(t *testing.T) *topic {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "documents"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: "documents", Partition: p, Key: []byte("k" + strconv.Itoa(i%5)), Value: []byte("{}")})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	tp := &topic{t: t, opts: opts, adm: adm}
	tp.commit(map[int32]int64{0: 10, 1: 6})
	return tp
}

func (tp *topic) commit(at map[int32]int64) {
	tp.t.Helper()
	o := kadm.Offsets{}
	for p, off := range at {
		o.Add(kadm.Offset{Topic: "documents", Partition: p, At: off, LeaderEpoch: -1})
	}
	if err := tp.adm.CommitAllOffsets(context.Background(), "projector", o); err != nil {
		tp.t.Fatal(err)
	}
}

func (tp *topic) committed() string {
	tp.t.Helper()
	o, err := tp.adm.FetchOffsets(context.Background(), "projector")
	if err != nil {
		tp.t.Fatal(err)
	}
	a, _ := o.Lookup("documents", 0)
	b, _ := o.Lookup("documents", 1)
	return fmt.Sprintf("%d %d", a.At, b.At)
}

// A plan says, per partition, the offset now and after and the records
// read again, counts their documents, and changes nothing.
func TestPlanChangesNothing(t *testing.T) {
	tp := newTopic(t)
	ctx := context.Background()
	plan, err := Make(ctx, tp.adm, "documents", "projector", Target{Offset: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CountDocuments(ctx, tp.opts, &plan, 1000, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(plan.Rows[0].Now, plan.Rows[0].After, plan.Rows[0].Reread(), plan.Rows[1].Now, plan.Rows[1].After, plan.Rows[1].Reread())
	if want := "10 2 8 6 2 4"; got != want {
		t.Errorf("now, after, re-read of the two partitions = %s, want %s", got, want)
	}
	if plan.Reread() != 12 || plan.Documents != 5 || plan.Counted != 12 {
		t.Errorf("plan re-reads %d records of %d documents (counted %d), want 12 of 5 (counted 12)", plan.Reread(), plan.Documents, plan.Counted)
	}
	if got := tp.committed(); got != "10 6" {
		t.Errorf("committed after a plan = %s, want 10 6 as before", got)
	}
	// A bounded count says how far it got.
	if err := CountDocuments(ctx, tp.opts, &plan, 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if plan.Counted != 3 || plan.Documents > 3 {
		t.Errorf("count limited to 3 records: counted %d, %d documents", plan.Counted, plan.Documents)
	}
	if err := Execute(ctx, tp.adm, plan); err != nil {
		t.Fatal(err)
	}
	if got := tp.committed(); got != "2 2" {
		t.Errorf("committed after Execute = %s, want 2 2", got)
	}
}

// A partition the topic does not have is a usage error, found while
// planning, before anything could change.
func TestPlanRefusesAPartitionTheTopicLacks(t *testing.T) {
	tp := newTopic(t)
	_, err := Make(context.Background(), tp.adm, "documents", "projector", Target{Earliest: true, Offset: -1}, []int32{0, 7})
	if _, ok := errors.AsType[*UsageError](err); !ok {
		t.Errorf("Make with partition 7 = %v, want a UsageError", err)
	}
}

// While a member is in the group, Wait gives up after its wait naming it,
// and the broker refuses Execute's commit: nothing is reset under a live
// member. Once it leaves, Wait returns and the reset is made.
func TestNoResetUnderALiveMember(t *testing.T) {
	tp := newTopic(t)
	ctx := context.Background()
	member, err := kgo.NewClient(append(tp.opts, kgo.ConsumerGroup("projector"), kgo.ConsumeTopics("documents"),
		kgo.InstanceID("projector-0"), kgo.DisableAutoCommit())...)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, gen := member.GroupMetadata(); gen > 0 {
			break
		}
		poll, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		member.PollFetches(poll)
		cancel()
		if time.Now().After(deadline) {
			t.Fatal("the member never joined")
		}
	}
	plan, err := Make(ctx, tp.adm, "documents", "projector", Target{Earliest: true, Offset: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Members) != 1 || !plan.Members[0].Static() || plan.Members[0].InstanceID != "projector-0" {
		t.Fatalf("plan's members = %+v, want the static member projector-0", plan.Members)
	}
	var seen []Member
	err = Wait(ctx, tp.adm, "projector", 300*time.Millisecond, 100*time.Millisecond, func(m []Member) { seen = m })
	active, ok := errors.AsType[*ActiveError](err)
	if !ok || len(active.Members) != 1 || len(seen) != 1 {
		t.Fatalf("Wait with a live member = %v (saw %v), want an ActiveError naming it", err, seen)
	}
	if err := Execute(ctx, tp.adm, plan); !errors.As(err, &active) {
		t.Errorf("Execute under a live member = %v, want the broker's refusal as an ActiveError", err)
	}
	if got := tp.committed(); got != "10 6" {
		t.Errorf("committed under a live member = %s, want 10 6 as before", got)
	}
}
