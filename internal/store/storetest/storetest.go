// Package storetest is the conformance test every store adapter passes: the
// same writes must leave the same chunks in the index, the graph and the
// relational store. Adapters run it against their real server.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/keys"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/reconcile"
	"github.com/projector/projector/internal/testenv"
)

// Store is an adapter under test.
type Store interface {
	Apply(ctx context.Context, w *project.Write) error
	ChunkCounts(ctx context.Context, keys []string) (map[string]int, error)
	ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error)
}

// Dim is the vector dimension the conformance documents use.
const Dim = 8

// Doc builds a live document whose chunks have ids, vectors and metadata as
// the projector would give them.
func Doc(key string, version int64, texts ...string) project.Document {
	emb := embed.NewHashing(Dim)
	vecs, _ := emb.Embed(context.Background(), texts)
	d := project.Document{
		Key: key, Version: version, Title: "title of " + key, Source: "test",
		Metadata:    map[string]any{"lang": "en", "pages": int64(len(texts)), "draft": false, "score": 0.5},
		ContentHash: fmt.Sprintf("hash-%s-%d-%d", key, version, len(texts)),
	}
	for i, t := range texts {
		d.Chunks = append(d.Chunks, project.Chunk{
			ID: keys.ChunkID(key, version, i), DocumentKey: key, Version: version, Ordinal: i,
			Text: t, Vector: vecs[i], Metadata: map[string]any{"position": int64(i)},
		})
	}
	return d
}

// Late says what a store does with a late write: one of a member that lost
// its partition, of an earlier event than the one the store holds.
type Late int

const (
	// RefusesLate stores (the graph, the relational store) leave what they
	// hold as it is.
	RefusesLate Late = iota
	// KeepsLate stores (the index, which has no transaction to refuse a
	// write in) add the late write's points of ids the newer event does
	// not have, and keep the newer event's: never take them away. An
	// exact write of the current state (the owner's settle) removes them.
	KeepsLate
)

// Run runs the conformance cases; prefix makes the document keys unique to
// this run, so stores shared between tests are not disturbed.
func Run(t *testing.T, s Store, prefix string, late Late) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := func(name string) string { return prefix + name }
	a, b, c, e, hostile := k("a"), k("b"), k("c"), k("e"), k(`q'"\}) DETACH DELETE n // '; DROP TABLE chunks; --`)
	all := []string{a, b, c, e, hostile}
	// at places a document's event in the log.
	at := func(d project.Document, offset int64) project.Document {
		d.Position = project.Position{Topic: prefix + "documents", Partition: 0, Offset: offset}
		return d
	}
	// in places it in one incarnation of the topic, named by id's first
	// byte: a topic deleted and created again restarts its offsets.
	in := func(d project.Document, id byte, offset int64) project.Document {
		d = at(d, offset)
		d.Position.TopicID = project.TopicID{id}
		return d
	}

	steps := []struct {
		name  string
		write project.Write
		want  map[string][]uuid.UUID
		// lateIDs are the ids a KeepsLate store adds; settle is the
		// owner's exact write that removes them again.
		lateIDs map[string][]uuid.UUID
		settle  project.Write
	}{
		{
			name:  "first versions",
			write: project.Write{Live: []project.Document{Doc(a, 1, "one", "two", "three"), Doc(b, 1, "alpha", "beta")}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 1, 3), b: keys.ChunkIDs(b, 1, 2)},
		},
		{
			name:  "redelivery changes nothing",
			write: project.Write{Live: []project.Document{Doc(a, 1, "one", "two", "three")}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 1, 3), b: keys.ChunkIDs(b, 1, 2)},
		},
		{
			name:  "a new version replaces the old chunks",
			write: project.Write{Live: []project.Document{Doc(a, 2, "uno", "dos")}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 2), b: keys.ChunkIDs(b, 1, 2)},
		},
		{
			name:  "shrinking a version removes the extra ordinals",
			write: project.Write{Live: []project.Document{Doc(a, 2, "uno")}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), b: keys.ChunkIDs(b, 1, 2)},
		},
		{
			name:    "an older version's late write changes nothing",
			write:   project.Write{Live: []project.Document{Doc(a, 1, "one", "two", "three")}},
			want:    map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), b: keys.ChunkIDs(b, 1, 2)},
			lateIDs: map[string][]uuid.UUID{a: keys.ChunkIDs(a, 1, 3)},
			settle:  project.Write{Live: []project.Document{Doc(a, 2, "uno")}, Exact: true},
		},
		{
			name:  "an older version's late withdrawal removes nothing",
			write: project.Write{Withdrawn: []project.Withdrawal{{Key: a, Version: 1}}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), b: keys.ChunkIDs(b, 1, 2)},
		},
		{
			name:  "withdrawal removes every chunk",
			write: project.Write{Withdrawn: []project.Withdrawal{{Key: b, Version: 1}}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1)},
		},
		{
			name:  "hostile text is data, never code",
			write: project.Write{Live: []project.Document{Doc(hostile, 1, `'); MATCH (n) DETACH DELETE n; //`, "\\x00\\' OR 1=1 --", "ünïcødé 🚀")}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3)},
		},
		{
			name:  "a document with no chunks",
			write: project.Write{Live: []project.Document{Doc(b, 2)}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3)},
		},
		{
			name:  "an event at a position of the log",
			write: project.Write{Live: []project.Document{at(Doc(c, 1, "x", "y", "z"), 10)}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3), c: keys.ChunkIDs(c, 1, 3)},
		},
		{
			name:  "a later event of the same version replaces it",
			write: project.Write{Live: []project.Document{at(Doc(c, 1, "p", "q"), 20)}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3), c: keys.ChunkIDs(c, 1, 2)},
		},
		{
			// Its chunk ids are the later event's and one more: a store
			// that compared versions only would take it.
			name:    "an earlier event of the same version read late changes nothing",
			write:   project.Write{Live: []project.Document{at(Doc(c, 1, "x", "y", "z"), 10)}},
			want:    map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3), c: keys.ChunkIDs(c, 1, 2)},
			lateIDs: map[string][]uuid.UUID{c: {keys.ChunkID(c, 1, 2)}},
			settle:  project.Write{Live: []project.Document{at(Doc(c, 1, "p", "q"), 20)}, Exact: true},
		},
		{
			name:  "an event of one incarnation of the topic",
			write: project.Write{Live: []project.Document{in(Doc(e, 1, "x", "y", "z"), 1, 10)}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3), c: keys.ChunkIDs(c, 1, 2), e: keys.ChunkIDs(e, 1, 3)},
		},
		{
			// At a lower offset, but offsets of two incarnations are not
			// ordered: the later write is taken.
			name:  "an event of the topic created again",
			write: project.Write{Live: []project.Document{in(Doc(e, 1, "p", "q"), 2, 5)}},
			want:  map[string][]uuid.UUID{a: keys.ChunkIDs(a, 2, 1), hostile: keys.ChunkIDs(hostile, 1, 3), c: keys.ChunkIDs(c, 1, 2), e: keys.ChunkIDs(e, 1, 2)},
		},
	}
	for _, st := range steps {
		if err := s.Apply(ctx, &st.write); err != nil {
			t.Fatalf("%s: Apply: %v", st.name, err)
		}
		if late == KeepsLate && st.lateIDs != nil {
			kept := map[string][]uuid.UUID{}
			for k, ids := range st.want {
				kept[k] = append(slices.Clone(ids), st.lateIDs[k]...)
			}
			check(ctx, t, s, st.name+" (the late points kept beside the newer)", all, kept)
			if err := s.Apply(ctx, &st.settle); err != nil {
				t.Fatalf("%s: the owner's exact write: %v", st.name, err)
			}
		}
		check(ctx, t, s, st.name, all, st.want)
	}
	cancelled(t, s, Doc(a, 3, "tres"))
}

// check requires s to hold exactly want of the documents all.
func check(ctx context.Context, t *testing.T, s Store, step string, all []string, want map[string][]uuid.UUID) {
	t.Helper()
	ids, err := s.ChunkIDs(ctx, all)
	if err != nil {
		t.Fatalf("%s: ChunkIDs: %v", step, err)
	}
	counts, err := s.ChunkCounts(ctx, all)
	if err != nil {
		t.Fatalf("%s: ChunkCounts: %v", step, err)
	}
	for _, key := range all {
		got, want := sorted(ids[key]), sorted(want[key])
		if !slices.Equal(got, want) {
			t.Errorf("%s: ids of %q = %v, want %v", step, key, got, want)
		}
		if counts[key] != len(want) {
			t.Errorf("%s: count of %q = %d, want %d", step, key, counts[key], len(want))
		}
	}
	// Qdrant's exact facet also returns a value whose points were all
	// deleted, with count 0: a caller that takes a key as present
	// would count a withdrawn document.
	for key, n := range counts {
		if n == 0 {
			t.Errorf("%s: ChunkCounts holds %q with 0 chunks, want a document without chunks left out", step, key)
		}
	}
}

// cancelled requires a call made after its context ended to say so in Go's
// terms: the service exits 0 on SIGTERM only when it can tell a shutdown
// from a store failure.
func cancelled(t *testing.T, s Store, d project.Document) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{d}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context: %v, want an error that is context.Canceled", err)
	}
	if _, err := s.ChunkIDs(ctx, []string{d.Key}); !errors.Is(err, context.Canceled) {
		t.Errorf("ChunkIDs with a cancelled context: %v, want an error that is context.Canceled", err)
	}
}

func sorted(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	slices.Sort(out)
	return out
}

// CheckCount checks the property reconcile relies on to skip a store's scan
// for unknown documents: Count(prefix) is the number of items Holdings
// returns for the keys ScanKeys finds under prefix, whatever the store
// holds (foreign or detached chunks included).
func CheckCount(t *testing.T, s interface {
	reconcile.Store
	reconcile.Counter
}, prefix string) {
	t.Helper()
	ctx := context.Background()
	var found []string
	err := s.ScanKeys(ctx, prefix, 100, func(keys []string) error {
		for _, k := range keys {
			if !slices.Contains(found, k) {
				found = append(found, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.Holdings(ctx, found)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, h := range held {
		want += int64(len(h.Chunks))
		if h.Present {
			want++
		}
	}
	n, ok, err := s.Count(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || n != want {
		t.Errorf("Count(%q) = %d, %v; want %d, true (the items Holdings returns for the keys ScanKeys finds)", prefix, n, ok, want)
	}
}

// BenchChunkIDs benchmarks a store's part of an id fence after a batch:
// the chunk ids of 400 documents of five chunks, read by key, with the
// client's CPU per read (testenv.ReportCPU) beside the time the server
// takes.
func BenchChunkIDs(b *testing.B, s Store, prefix string) {
	ctx := context.Background()
	w := &project.Write{}
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sdoc-%d", prefix, i)
		w.Live = append(w.Live, Doc(keys[i], 1, "a", "b", "c", "d", "e"))
	}
	if err := s.Apply(ctx, w); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	testenv.ReportCPU(b)
	for b.Loop() {
		ids, err := s.ChunkIDs(ctx, keys)
		if err != nil || len(ids) != len(keys) {
			b.Fatalf("ChunkIDs: %d documents, %v", len(ids), err)
		}
	}
}
