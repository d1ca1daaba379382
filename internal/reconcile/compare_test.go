package reconcile

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/keys"
)

// held returns the chunks a store holds when it holds ordinals of a version.
func held(key string, version int64, ordinals ...int) []Held {
	out := make([]Held, len(ordinals))
	for i, o := range ordinals {
		out[i] = Held{ID: keys.ChunkID(key, version, o), Version: version}
	}
	return out
}

// brief renders discrepancies as "class missing/extra" strings, enough to
// tell every classification apart.
func brief(ds []Discrepancy) []string {
	var out []string
	for _, d := range ds {
		s := fmt.Sprintf("%s %d/%d", d.Class, d.Missing, d.Extra)
		if d.NoRecord {
			s += " no-record"
		}
		if len(d.StoreVersions) > 0 {
			s += fmt.Sprintf(" versions%v", d.StoreVersions)
		}
		out = append(out, s)
	}
	return out
}

func TestCompare(t *testing.T) {
	const k = "doc"
	live := Decision{Key: k, Version: 3, ChunkCount: 3}
	foreign := Held{ID: uuid.MustParse("00000000-0000-4000-8000-000000000001"), Version: 3}
	tests := []struct {
		name string
		d    Decision
		h    Holding
		want []string
	}{
		{"agrees", live, Holding{Chunks: held(k, 3, 0, 1, 2)}, nil},
		{"graph agrees", live, Holding{Chunks: held(k, 3, 0, 1, 2), Records: true, Present: true, Version: 3}, nil},
		{"one missing", live, Holding{Chunks: held(k, 3, 0, 2)}, []string{"missing 1/0"}},
		{"all missing", live, Holding{}, []string{"missing 3/0"}},
		{"no document node", live, Holding{Records: true}, []string{"missing 3/0 no-record"}},
		{"no document node, no chunks wanted", Decision{Key: k, Version: 1}, Holding{Records: true}, []string{"missing 0/0 no-record"}},
		{"detached chunk is missing", live, Holding{Chunks: append(held(k, 3, 0, 1), Held{ID: keys.ChunkID(k, 3, 2), Version: 3, Detached: true}), Records: true, Present: true, Version: 3}, []string{"missing 1/0"}},
		{"foreign id", live, Holding{Chunks: append(held(k, 3, 0, 1, 2), foreign)}, []string{"orphaned 0/1"}},
		{"foreign id instead of one", live, Holding{Chunks: append(held(k, 3, 0, 1), foreign)}, []string{"missing 1/0", "orphaned 0/1"}},
		{"ordinal past the count", live, Holding{Chunks: held(k, 3, 0, 1, 2, 3)}, []string{"orphaned 0/1"}},
		{"non-uuid id", live, Holding{Chunks: append(held(k, 3, 0, 1, 2), Held{ID: uuid.Nil})}, []string{"orphaned 0/1"}},
		{"older version", live, Holding{Chunks: held(k, 2, 0, 1)}, []string{"version_skew 3/2 versions[2]"}},
		{"newer version left over", live, Holding{Chunks: append(held(k, 3, 0, 1, 2), held(k, 4, 0)...)}, []string{"version_skew 0/1 versions[4]"}},
		{"document node at another version", live, Holding{Chunks: held(k, 3, 0, 1, 2), Records: true, Present: true, Version: 2}, []string{"version_skew 0/0 versions[2]"}},
		{"withdrawn and gone", Decision{Key: k, Version: 2, Withdrawn: true}, Holding{Records: true}, nil},
		{"withdrawn but present", Decision{Key: k, Version: 2, Withdrawn: true}, Holding{Chunks: held(k, 1, 0)}, []string{"withdrawn_present 0/1 versions[1]"}},
		{"withdrawn but document node present", Decision{Key: k, Version: 2, Withdrawn: true}, Holding{Records: true, Present: true, Version: 2}, []string{"withdrawn_present 0/0 versions[2]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := brief(compare("s", tt.d, tt.h))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("compare = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFirstIDsIsBoundedAndSorted(t *testing.T) {
	ids := keys.ChunkIDs("doc", 1, 3*MaxIDs)
	got := firstIDs(ids)
	if len(got) != MaxIDs {
		t.Fatalf("firstIDs kept %d ids, want %d", len(got), MaxIDs)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].String() >= got[i].String() {
			t.Fatalf("firstIDs = %v, want ascending", got)
		}
	}
	again := firstIDs(append([]uuid.UUID{ids[len(ids)-1]}, ids[:len(ids)-1]...))
	if fmt.Sprint(again) != fmt.Sprint(got) {
		t.Errorf("firstIDs of a reordered list = %v, want %v (the same ids whatever the order)", again, got)
	}
}
