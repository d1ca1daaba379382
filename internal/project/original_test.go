package project

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// redriven is a record at offset whose HeaderOriginalPosition is orig, as
// redrive publishes a dead letter.
func redriven(offset int64, key, value, orig string) *kgo.Record {
	r := rec(offset, key, value)
	if value == "" {
		r.Value = nil
	}
	r.Headers = []kgo.RecordHeader{{Key: HeaderOriginalPosition, Value: []byte(orig)}}
	return r
}

// handle projects recs in one batch and fails the test on an error.
func (f *fixture) handle(t *testing.T, id TopicID, recs ...*kgo.Record) {
	t.Helper()
	if err := f.p.Handle(context.Background(), Fence{}, id, recs); err != nil {
		t.Fatalf("Handle: %v", err)
	}
}

// liveVersion returns the version every store holds of key live, or -1
// when one of them does not hold it live.
func (f *fixture) liveVersion(key string) int64 {
	v := f.rel.states[key].Version
	for _, m := range []*memStore{f.index, f.graph, f.rel} {
		if st, ok := m.states[key]; !ok || st.Withdrawn || st.Version != v || len(m.chunks[key]) == 0 {
			return -1
		}
	}
	return v
}

// The log of issue 23: X v1 at 0; the tombstone at 1 fails and is
// dead-lettered; X v2 at 2 revives X; the tombstone comes back redriven,
// twice (a redrive killed before it committed sends it again). Judged at
// its original place it is stale, and X v2 stays in every store.
func TestRedrivenTombstoneAfterRevivalIsStale(t *testing.T) {
	id := TopicID{7}
	f := newFixture(t, Config{})
	f.handle(t, id, rec(0, "x", upsert("x", 1)))
	f.handle(t, id, rec(2, "x", upsert("x", 2)))
	orig := Position{Topic: "documents", TopicID: id, Partition: 0, Offset: 1}.String()
	f.handle(t, id, redriven(3, "x", "", orig))
	f.handle(t, id, redriven(4, "x", "", orig))
	if got := f.liveVersion("x"); got != 2 {
		t.Fatalf("x live at version %d after the redriven tombstone, want 2 in every store", got)
	}
	if n := testutil.ToFloat64(f.p.m.records.WithLabelValues(string(OutcomeStale))); n != 2 {
		t.Errorf("stale records = %v, want the two redriven copies", n)
	}

	// A tombstone published now, with no original place, withdraws X.
	tomb := rec(5, "x", "")
	tomb.Value = nil
	f.handle(t, id, tomb)
	if got := f.liveVersion("x"); got != -1 {
		t.Errorf("x live at version %d after a new tombstone, want withdrawn", got)
	}
}

// With no revival since, the redriven tombstone withdraws the document,
// and a second copy of it is stale: one letter has the effect of one.
func TestRedrivenTombstoneWithdrawsOnce(t *testing.T) {
	id := TopicID{7}
	f := newFixture(t, Config{})
	f.handle(t, id, rec(0, "x", upsert("x", 1)))
	orig := Position{Topic: "documents", TopicID: id, Partition: 0, Offset: 1}
	f.handle(t, id, redriven(5, "x", "", orig.String()))
	if got := f.liveVersion("x"); got != -1 {
		t.Fatalf("x live at version %d, want withdrawn by the redriven tombstone", got)
	}
	if got := f.rel.states["x"].Position; got != orig {
		t.Errorf("stored position = %+v, want the original place %+v", got, orig)
	}
	f.handle(t, id, redriven(6, "x", "", orig.String()))
	if n := testutil.ToFloat64(f.p.m.records.WithLabelValues(string(OutcomeStale))); n != 1 {
		t.Errorf("stale records = %v, want the second copy", n)
	}
}

// An original place that cannot be ordered against the stored one (another
// partition, a topic created again, not before the record) is ignored: the
// record is judged where it is, so the tombstone withdraws X.
func TestOriginalPositionOutsideTheLogIsIgnored(t *testing.T) {
	id := TopicID{7}
	for name, orig := range map[string]Position{
		"another partition":    {Topic: "documents", TopicID: id, Partition: 3, Offset: 1},
		"another topic":        {Topic: "documents-old", TopicID: id, Partition: 0, Offset: 1},
		"another incarnation":  {Topic: "documents", TopicID: TopicID{8}, Partition: 0, Offset: 1},
		"after the record":     {Topic: "documents", TopicID: id, Partition: 0, Offset: 9},
		"the record's own":     {Topic: "documents", TopicID: id, Partition: 0, Offset: 3},
		"unknown id, its name": {Topic: "documents", Partition: 0, Offset: 1},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, Config{})
			f.handle(t, id, rec(0, "x", upsert("x", 1)))
			f.handle(t, id, rec(2, "x", upsert("x", 2)))
			f.handle(t, id, redriven(3, "x", "", orig.String()))
			want := int64(-1)
			if name == "unknown id, its name" {
				want = 2 // the same log as far as anyone can tell: stale
			}
			if got := f.liveVersion("x"); got != want {
				t.Errorf("x live at version %d, want %d", got, want)
			}
		})
	}
}

func TestInvalidOriginalPositionIsDeadLettered(t *testing.T) {
	f := newFixture(t, Config{})
	f.handle(t, TopicID{7}, redriven(3, "x", upsert("x", 1), "documents/zero/1"))
	if got := f.letters.reasons(); len(got) != 1 || got[0] != "invalid_position:x" {
		t.Fatalf("dead letters = %v, want x with reason invalid_position", got)
	}
	if !strings.Contains(f.letters.letters[0].Detail, HeaderOriginalPosition) {
		t.Errorf("detail = %q, want it to name the header", f.letters.letters[0].Detail)
	}
	if f.letters.letters[0].TopicID != (TopicID{7}) {
		t.Errorf("dead letter topic id = %v, want the record's", f.letters.letters[0].TopicID)
	}
	if got := f.liveVersion("x"); got != -1 {
		t.Errorf("x projected at version %d, want nothing written", got)
	}
}

func TestParsePosition(t *testing.T) {
	want := Position{Topic: "docs.v1", TopicID: TopicID{1, 2, 3, 255}, Partition: 12, Offset: 9001}
	got, err := ParsePosition(want.String())
	if err != nil || got != want {
		t.Fatalf("ParsePosition(%q) = %+v, %v; want %+v", want.String(), got, err, want)
	}
	noID := Position{Topic: "docs", Partition: 0, Offset: 0}
	if got, err := ParsePosition("docs/0/0"); err != nil || got != noID {
		t.Errorf("ParsePosition(docs/0/0) = %+v, %v; want %+v", got, err, noID)
	}
	for _, bad := range []string{"", "docs", "docs/0", "/0/1", "docs/-1/1", "docs/0/-1", "docs/x/1", "docs/0/1/not-an-id",
		"docs/0/1/AAAAAAAAAAAAAAAAAAAAAA/extra", "docs/99999999999/1", strings.Repeat("d", 400) + "/0/1"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) succeeded, want an error", bad)
		}
	}
}
