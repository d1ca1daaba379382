package explore

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ev is one event of a document, as the source system publishes it.
type ev struct {
	version   int64
	withdraw  bool
	tombstone bool
	title     string
	chunks    []string
}

// value is the record value of the event for key (nil for a tombstone).
func (e ev) value(key string) []byte {
	if e.tombstone {
		return nil
	}
	m := map[string]any{"document_key": key, "version": e.version}
	if e.withdraw {
		m["op"] = "withdraw"
	} else {
		m["title"] = e.title
		chunks := make([]map[string]any, len(e.chunks))
		for i, c := range e.chunks {
			chunks[i] = map[string]any{"text": c}
		}
		m["chunks"] = chunks
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // constant shapes: cannot happen
	}
	return b
}

func live(version int64, title string, chunks ...string) ev {
	return ev{version: version, title: title, chunks: chunks}
}

// kind is what the log holds after the committed prefix: the event the
// late writer projects first, then the newer one the owner also reads.
type kind struct {
	name   string
	prefix []ev
	first  ev
	newer  ev
	// overwrite projects a same-version event with other content
	// (--on-conflict overwrite) instead of dead-lettering it.
	overwrite bool
}

// kinds are the newer events the issue names: the same event again, a new
// version, a withdrawal, a tombstone, a same-version overwrite, and a
// revival after a withdrawal; and a new document. Every prefix leaves a
// live version 1 with more chunks than what follows, so a chunk left
// behind shows.
var kinds = []kind{
	{name: "redelivered", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: live(2, "two", "x", "y"), newer: live(2, "two", "x", "y")},
	{name: "new-version", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: live(2, "two", "x", "y"), newer: live(3, "three", "z")},
	{name: "withdrawal", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: live(2, "two", "x", "y"), newer: ev{version: 2, withdraw: true}},
	{name: "tombstone", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: live(2, "two", "x", "y"), newer: ev{tombstone: true}},
	{name: "same-version-overwrite", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: live(2, "two", "x", "y", "w"), newer: live(2, "other", "p", "q"), overwrite: true},
	{name: "revival", prefix: []ev{live(1, "one", "a", "b", "c")},
		first: ev{version: 1, withdraw: true}, newer: live(2, "two", "x", "y")},
	// A document no store holds yet: what a repair that deletes unknown
	// documents finds while its first write is on its way.
	{name: "new-document", first: live(1, "one", "a", "b", "c"), newer: live(2, "two", "x")},
}

// records is the kind's log for key in partition part of topic: the
// prefix, then first and newer, at offsets from 0.
func (k kind) records(topic string, part int32, key string) []*kgo.Record {
	var out []*kgo.Record
	for i, e := range append(append([]ev{}, k.prefix...), k.first, k.newer) {
		out = append(out, &kgo.Record{Topic: topic, Partition: part, Offset: int64(i), Key: []byte(key), Value: e.value(key)})
	}
	return out
}

// split is how the late writer (A) and the owner (B) cut the uncommitted
// range [first, newer] into batches: indexes into it.
type split struct {
	name string
	a    []int
	b    [][]int
}

// splits: B's batches the same as A's, smaller, larger, and both whole.
var splits = []split{
	{name: "same", a: []int{0}, b: [][]int{{0}, {1}}},
	{name: "smaller", a: []int{0, 1}, b: [][]int{{0}, {1}}},
	{name: "larger", a: []int{0}, b: [][]int{{0, 1}}},
	{name: "whole", a: []int{0, 1}, b: [][]int{{0, 1}}},
}

// The fault points of a projection, in the order a batch passes them
// (internal/project): the late writer's, and the owner's, which also has
// the point between taking its token and raising the graph's to it, the
// explorer's own between a batch's fence and its commit, and the settle's.
// A re-projection after a fence mismatch passes "reproject" and the batch
// points again; a case whose point is never reached is skipped.
var (
	batchPoints  = []string{"before-index", "index-checked", "after-index", "after-graph", "after-relational", "reproject"}
	latePoints   = batchPoints
	settlePoints = []string{"settle", "settle-write"}
)

// ownerPoints are the owner's points: its token, its batches' (numbered by
// batch) and its settle's.
func ownerPoints(s split) []string {
	out := []string{"token"}
	for n := range s.b {
		for _, p := range append(append([]string{}, batchPoints...), "commit") {
			out = append(out, fmt.Sprintf("%d.%s", n+1, p))
		}
	}
	return append(out, settlePoints...)
}

// order says who goes on first once both writers are held: the late
// writer to its end, or one step of it and then the owner to its end.
type order string

const (
	lateFirst  order = "late-first"
	ownerFirst order = "owner-first"
)

// kase is one forced interleaving: the late writer held at late, the owner
// run to owner, then both let go in the given order; or, with repair set,
// the owner held at owner and a repair run to repair.
type kase struct {
	kind   kind
	split  split
	late   string
	repair string
	owner  string
	order  order
}

// name is how a failing case is named and run again (EXPLORE_CASE).
func (c kase) name() string {
	other := "late@" + c.late
	if c.repair != "" {
		other = "repair@" + c.repair
	}
	return strings.Join([]string{c.kind.name, c.split.name, other, "owner@" + c.owner, string(c.order)}, ":")
}

// allCases enumerates every pair of the late writer's and the owner's
// points, in both orders, for every kind and split, then the pairs of the
// owner's and a repair's.
func allCases() []kase {
	var out []kase
	for _, k := range kinds {
		for _, s := range splits {
			for _, a := range latePoints {
				for _, b := range ownerPoints(s) {
					for _, o := range []order{lateFirst, ownerFirst} {
						out = append(out, kase{kind: k, split: s, late: a, owner: b, order: o})
					}
				}
			}
		}
	}
	return append(out, repairCases()...)
}
