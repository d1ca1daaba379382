package generation

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
)

// doc is a document as the fill's fake relational store holds it.
type doc struct {
	version   int64
	chunks    int
	withdrawn bool
}

// fillStore is a FillStore in memory; afterRead, when set, runs after
// each Reprojection has read, to move documents on under the fill as run
// does.
type fillStore struct {
	docs      map[string]doc
	p         Progress
	token     int64
	held      bool
	lost      bool
	reads     int
	afterRead func(read int)
}

func (s *fillStore) TakeFill(_ context.Context, g Generation, _ time.Duration) (int64, Progress, error) {
	if s.held {
		return 0, Progress{}, &FillHeldError{Generation: g.Number, For: time.Second}
	}
	s.token++
	s.held = true
	return s.token, s.p, nil
}

func (s *fillStore) RenewFill(_ context.Context, g Generation, token int64, _ time.Duration, p Progress) error {
	if s.lost || token != s.token {
		return &FillLostError{Generation: g.Number, Token: token}
	}
	s.p = p
	return nil
}

func (s *fillStore) ReleaseFill(context.Context, Generation, int64) error {
	s.held = false
	return nil
}

func (s *fillStore) LiveKeys(_ context.Context, after string, limit int) ([]string, error) {
	var out []string
	for k, d := range s.docs {
		if !d.withdrawn && k > after {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out[:min(limit, len(out))], nil
}

func (s *fillStore) CountLive(context.Context) (int64, error) { return int64(len(s.docs)), nil }

func (s *fillStore) Reprojection(_ context.Context, ks []string) (*project.Write, map[string][]int, error) {
	s.reads++
	w := s.write(ks)
	if s.afterRead != nil {
		s.afterRead(s.reads)
	}
	return w, nil, nil
}

// write is the current state of ks, as run writes it and Reprojection
// reads it.
func (s *fillStore) write(ks []string) *project.Write {
	w := &project.Write{}
	for _, k := range ks {
		d, ok := s.docs[k]
		switch {
		case !ok:
		case d.withdrawn:
			w.Withdrawn = append(w.Withdrawn, project.Withdrawal{Key: k, Version: d.version})
		default:
			live := project.Document{Key: k, Version: d.version}
			for i := range d.chunks {
				live.Chunks = append(live.Chunks, project.Chunk{ID: keys.ChunkID(k, d.version, i), DocumentKey: k, Version: d.version, Ordinal: i, Text: k})
			}
			w.Live = append(w.Live, live)
		}
	}
	return w
}

// point is a point of the fake index.
type point struct {
	key     string
	version int64
	vector  []float32
}

// fillIndex is an index in memory that writes as Qdrant does for the
// projector: an upsert replaces no point of a later version and inserts
// new ids regardless; the removals take older versions and the written
// version's other ordinals.
type fillIndex struct{ points map[uuid.UUID]point }

func (x *fillIndex) Apply(_ context.Context, w *project.Write) error {
	for _, d := range w.Live {
		for _, c := range d.Chunks {
			if p, ok := x.points[c.ID]; !ok || p.version <= d.Version {
				x.points[c.ID] = point{key: d.Key, version: d.Version, vector: c.Vector}
			}
		}
	}
	return x.Prune(context.Background(), w)
}

func (x *fillIndex) Prune(_ context.Context, w *project.Write) error {
	for id, p := range x.points {
		for _, d := range w.Live {
			if p.key == d.Key && (p.version < d.Version || (p.version == d.Version && !slices.ContainsFunc(d.Chunks, func(c project.Chunk) bool { return c.ID == id }))) {
				delete(x.points, id)
			}
		}
		for _, d := range w.Withdrawn {
			if p.key == d.Key && p.version <= d.Version {
				delete(x.points, id)
			}
		}
	}
	return nil
}

// requireHolds fails unless x holds exactly the live chunks of s, each
// with the embedder's vector.
func requireHolds(t *testing.T, x *fillIndex, s *fillStore) {
	t.Helper()
	want := map[uuid.UUID]bool{}
	for k, d := range s.docs {
		if !d.withdrawn {
			for _, id := range keys.ChunkIDs(k, d.version, d.chunks) {
				want[id] = true
			}
		}
	}
	for id, p := range x.points {
		if !want[id] {
			t.Errorf("the generation holds point %s of %s version %d, which is not current", id, p.key, p.version)
		}
		if want, _ := embed.NewHashing(2).Embed(context.Background(), []string{p.key}); !slices.Equal(p.vector, want[0]) {
			t.Errorf("point %s has the vector %v, want the generation's embedder's %v", id, p.vector, want[0])
		}
	}
	for id := range want {
		if _, ok := x.points[id]; !ok {
			t.Errorf("the generation lacks the current chunk %s", id)
		}
	}
}

// runWrite writes the index as run does the documents ks of s.
func runWrite(x *fillIndex, s *fillStore, ks ...string) {
	w, err := project.Reembed(context.Background(), embed.NewHashing(2), 2, s.write(ks))
	if err != nil {
		panic(err)
	}
	_ = x.Apply(context.Background(), w)
}

func TestFill(t *testing.T) {
	g := Generation{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building}
	cfg := FillConfig{PageSize: 2, LeaseTTL: time.Minute}
	tests := []struct {
		name string
		// run is what run does to the documents, and to the generation,
		// which it writes too, after the fill's read number read (1: the
		// first page's read, 2: its read again after the write).
		run func(s *fillStore, x *fillIndex, read int)
	}{
		{"nothing moves", nil},
		{"a new version committed between the fill's read and its write", func(s *fillStore, x *fillIndex, read int) {
			if read == 1 {
				s.docs["a"] = doc{version: 2, chunks: 1}
				runWrite(x, s, "a")
			}
		}},
		{"a withdrawal committed between the fill's read and its write", func(s *fillStore, x *fillIndex, read int) {
			if read == 1 {
				s.docs["b"] = doc{version: 1, withdrawn: true}
				runWrite(x, s, "b")
			}
		}},
		{"run's index write before the fill's, its commit after the fill's prune", func(s *fillStore, x *fillIndex, read int) {
			next := &fillStore{docs: map[string]doc{"a": {version: 2, chunks: 1}}}
			switch read {
			case 1:
				runWrite(x, next, "a")
			case 2:
				// The fill's prune kept run's version 2; run commits it
				// now, and its fence of the generation finds the fill's
				// version 1 and re-projects exactly, as project's fence
				// does.
				s.docs["a"] = next.docs["a"]
				for id, p := range x.points {
					if p.key == "a" && p.version < 2 {
						delete(x.points, id)
					}
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fillStore{docs: map[string]doc{"a": {version: 1, chunks: 3}, "b": {version: 1, chunks: 2}, "c": {version: 4, chunks: 1}}}
			x := &fillIndex{points: map[uuid.UUID]point{}}
			if tt.run != nil {
				s.afterRead = func(read int) { tt.run(s, x, read) }
			}
			var lines strings.Builder
			cfg := cfg
			cfg.Progress = &lines
			p, err := Fill(context.Background(), cfg, s, x, embed.NewHashing(2), g)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Done || !s.p.Done || s.held {
				t.Errorf("progress %+v, recorded %+v, lease held %v: want done, recorded, released", p, s.p, s.held)
			}
			requireHolds(t, x, s)
			if !strings.Contains(lines.String(), "generation 2: ") || !strings.Contains(lines.String(), "ETA") {
				t.Errorf("progress lines %q, want documents, chunks, rate and ETA", lines.String())
			}
		})
	}
}

func TestFillResumesAndRefusesASecondFill(t *testing.T) {
	g := Generation{Number: 2, Collection: "chunks_g2", Embedder: http768, State: Building}
	s := &fillStore{docs: map[string]doc{"a": {version: 1, chunks: 1}, "b": {version: 1, chunks: 1}, "c": {version: 1, chunks: 1}}}
	x := &fillIndex{points: map[uuid.UUID]point{}}
	// The first fill loses its lease after its first page (killed, or
	// stalled past the lease): it stops, and what it recorded is where the
	// next one goes on.
	s.afterRead = func(read int) { s.lost = read == 3 }
	_, err := Fill(context.Background(), FillConfig{PageSize: 1, LeaseTTL: time.Minute}, s, x, embed.NewHashing(2), g)
	if _, ok := errors.AsType[*FillLostError](err); !ok {
		t.Fatalf("Fill losing its lease = %v, want a FillLostError", err)
	}
	if s.p.After != "a" || s.p.Documents != 1 {
		t.Fatalf("recorded progress %+v, want a filled", s.p)
	}
	s.held, s.lost, s.afterRead = true, false, nil
	if _, err := Fill(context.Background(), FillConfig{PageSize: 1, LeaseTTL: time.Minute}, s, x, embed.NewHashing(2), g); err == nil {
		t.Fatal("a fill while another holds the lease: nil error, want a FillHeldError")
	}
	s.held = false
	reads := s.reads
	p, err := Fill(context.Background(), FillConfig{PageSize: 1, LeaseTTL: time.Minute}, s, x, embed.NewHashing(2), g)
	if err != nil {
		t.Fatal(err)
	}
	if p.Documents != 3 || s.reads-reads != 4 {
		t.Errorf("resumed fill: %+v after %d reads, want 3 documents and two pages read twice each", p, s.reads-reads)
	}
	requireHolds(t, x, s)
}
