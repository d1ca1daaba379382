package index

import (
	"context"
	"slices"
	"testing"

	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// TestExactWriteReplacesWhateverItHolds: the index holds the points of a
// later event than the owner's current one (a writer that died or lost its
// partition before its relational write): an ordinary write of the current
// event, only moving forward, keeps them; the owner's exact write leaves
// exactly the current event's points, and Points reports the event each
// point is of.
func TestExactWriteReplacesWhateverItHolds(t *testing.T) {
	s := openTest(t, storetest.Dim)
	ctx := context.Background()
	at := func(d project.Document, offset int64) project.Document {
		d.Position = project.Position{Topic: "documents", Partition: 4, Offset: offset}
		return d
	}
	later := at(storetest.Doc("x", 3, "z", "zz", "zzz"), 12)
	sameLater := at(storetest.Doc("y", 2, "p"), 12)
	current, sameCurrent := at(storetest.Doc("x", 2, "a", "b"), 11), at(storetest.Doc("y", 2, "q", "r"), 11)
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{later, sameLater}}); err != nil {
		t.Fatal(err)
	}
	ordinary := &project.Write{Live: []project.Document{current, sameCurrent}}
	if err := s.Apply(ctx, ordinary); err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points(ctx, []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts["x"]) != 5 {
		t.Errorf("after the ordinary write: %d points of x, want the later event's 3 kept beside the current 2", len(pts["x"]))
	}
	for _, p := range pts["y"] {
		if p.ID == keys.ChunkID("y", 2, 0) && p.Position.Offset != 12 {
			t.Errorf("the ordinary write replaced y's ordinal 0 of the later event (offset %d), want it kept", p.Position.Offset)
		}
	}
	exact := &project.Write{Live: []project.Document{current, sameCurrent}, Exact: true}
	if err := s.Apply(ctx, exact); err != nil {
		t.Fatal(err)
	}
	if pts, err = s.Points(ctx, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	for key, d := range map[string]project.Document{"x": current, "y": sameCurrent} {
		var got []string
		for _, p := range pts[key] {
			if p.Version != d.Version || p.Position != d.Position {
				t.Errorf("%s: point %s of version %d at %+v after the exact write, want version %d at %+v", key, p.ID, p.Version, p.Position, d.Version, d.Position)
			}
			got = append(got, p.ID.String())
		}
		var want []string
		for _, c := range d.Chunks {
			want = append(want, c.ID.String())
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: points %v after the exact write, want exactly %v", key, got, want)
		}
	}
	if err := s.Apply(ctx, &project.Write{Withdrawn: []project.Withdrawal{{Key: "x", Version: 1}}, Exact: true}); err != nil {
		t.Fatal(err)
	}
	if pts, err = s.Points(ctx, []string{"x"}); err != nil || len(pts["x"]) != 0 {
		t.Errorf("after an exact withdrawal (of an older version than held): %v, %v; want no point of x", pts["x"], err)
	}
}
