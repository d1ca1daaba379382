package project

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
)

// ev builds a decoded event for the fold tests; content names the content.
func ev(key string, version int64, op keys.Op, content string) item {
	e := event.Event{Key: key, Version: version, Op: op}
	if op == keys.OpUpsert {
		e.ContentHash = "hash-" + content
		e.Chunks = []event.Chunk{{Text: content}}
	}
	return item{rec: &kgo.Record{Topic: "t", Offset: version}, ev: e}
}

func tombstone(key string) item {
	return item{rec: &kgo.Record{Topic: "t"}, ev: event.Event{Key: key, Op: keys.OpWithdraw, Tombstone: true}}
}

// at places it at offset in partition 0 of topic "t", whose topic id is id.
func at(it item, offset int64, id byte) item {
	it.rec = &kgo.Record{Topic: "t", Offset: offset}
	it.pos = Position{Topic: "t", TopicID: TopicID{id}, Offset: offset}
	return it
}

// stored is a document's stored state, last changed at offset of partition
// 0 of topic "t" with topic id id.
func stored(st State, offset int64, id byte) State {
	st.Position = Position{Topic: "t", TopicID: TopicID{id}, Offset: offset}
	return st
}

func up(key string, v int64, content string) item { return ev(key, v, keys.OpUpsert, content) }
func wd(key string, v int64) item                 { return ev(key, v, keys.OpWithdraw, "") }

func TestFold(t *testing.T) {
	tests := []struct {
		name     string
		stored   map[string]State
		policy   ConflictPolicy
		items    []item
		outcomes []Outcome
		// final is the net state per touched document.
		final map[string]State
		// positions, when set, are the net positions per touched document.
		positions map[string]Position
		ledger    []string
		letters   []event.Reason
	}{
		{
			name:     "new document",
			items:    []item{up("a", 1, "x")},
			outcomes: []Outcome{OutcomeProjected},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:a:v1:upsert"},
		},
		{
			name:     "redelivery is rewritten, not skipped",
			stored:   map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			items:    []item{up("a", 1, "x")},
			outcomes: []Outcome{OutcomeRedelivered},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:a:v1:upsert"},
		},
		{
			name:     "stale upsert writes nothing",
			stored:   map[string]State{"a": {Version: 3, ContentHash: "hash-x"}},
			items:    []item{up("a", 2, "y")},
			outcomes: []Outcome{OutcomeStale},
			final:    map[string]State{},
		},
		{
			name:     "stale withdraw writes nothing",
			stored:   map[string]State{"a": {Version: 3, ContentHash: "hash-x"}},
			items:    []item{wd("a", 2)},
			outcomes: []Outcome{OutcomeStale},
			final:    map[string]State{},
		},
		{
			name:     "two versions in one batch keep the last",
			items:    []item{up("a", 1, "x"), up("a", 2, "y"), up("a", 1, "x")},
			outcomes: []Outcome{OutcomeProjected, OutcomeProjected, OutcomeStale},
			final:    map[string]State{"a": {Version: 2, ContentHash: "hash-y"}},
			ledger:   []string{"document:a:v1:upsert", "document:a:v2:upsert"},
		},
		{
			name:     "duplicates in one batch give one ledger row",
			items:    []item{up("a", 1, "x"), up("a", 1, "x")},
			outcomes: []Outcome{OutcomeProjected, OutcomeRedelivered},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:a:v1:upsert"},
		},
		{
			name:     "withdraw after upsert in one batch",
			items:    []item{up("a", 1, "x"), wd("a", 1)},
			outcomes: []Outcome{OutcomeProjected, OutcomeWithdrawn},
			final:    map[string]State{"a": {Version: 1, Withdrawn: true}},
			ledger:   []string{"document:a:v1:upsert", "document:a:v1:withdraw"},
		},
		{
			name:     "withdrawn document stays withdrawn for its version",
			stored:   map[string]State{"a": {Version: 2, Withdrawn: true}},
			items:    []item{up("a", 1, "x"), up("a", 2, "x")},
			outcomes: []Outcome{OutcomeStale, OutcomeStale},
			final:    map[string]State{},
		},
		{
			name:     "a higher version revives",
			stored:   map[string]State{"a": {Version: 2, Withdrawn: true}},
			items:    []item{up("a", 3, "z")},
			outcomes: []Outcome{OutcomeProjected},
			final:    map[string]State{"a": {Version: 3, ContentHash: "hash-z"}},
			ledger:   []string{"document:a:v3:upsert"},
		},
		{
			name:     "tombstone withdraws the current version",
			stored:   map[string]State{"a": {Version: 4, ContentHash: "hash-x"}},
			items:    []item{tombstone("a")},
			outcomes: []Outcome{OutcomeWithdrawn},
			final:    map[string]State{"a": {Version: 4, Withdrawn: true}},
			ledger:   []string{"document:a:v4:withdraw"},
		},
		{
			name:     "tombstone after an upsert in the same batch",
			items:    []item{up("a", 5, "x"), tombstone("a")},
			outcomes: []Outcome{OutcomeProjected, OutcomeWithdrawn},
			final:    map[string]State{"a": {Version: 5, Withdrawn: true}},
			ledger:   []string{"document:a:v5:upsert", "document:a:v5:withdraw"},
		},
		{
			name:     "tombstone of an unknown document",
			items:    []item{tombstone("a"), up("a", 1, "x")},
			outcomes: []Outcome{OutcomeWithdrawn, OutcomeProjected},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:a:v0:withdraw", "document:a:v1:upsert"},
		},
		{
			name:      "a tombstone before the stored position is a redelivery",
			stored:    map[string]State{"a": stored(State{Version: 3, ContentHash: "hash-x"}, 7, 1)},
			items:     []item{at(tombstone("a"), 5, 1), at(tombstone("a"), 7, 1)},
			outcomes:  []Outcome{OutcomeStale, OutcomeStale},
			final:     map[string]State{},
			positions: map[string]Position{},
		},
		{
			name:      "a tombstone after the stored position withdraws",
			stored:    map[string]State{"a": stored(State{Version: 3, ContentHash: "hash-x"}, 7, 1)},
			items:     []item{at(tombstone("a"), 8, 1)},
			outcomes:  []Outcome{OutcomeWithdrawn},
			final:     map[string]State{"a": {Version: 3, Withdrawn: true}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{1}, Offset: 8}},
			ledger:    []string{"document:a:v3:withdraw"},
		},
		{
			name:      "a batch [tombstone, revival] redelivered after its commit",
			stored:    map[string]State{"a": stored(State{Version: 2, ContentHash: "hash-y"}, 11, 1)},
			items:     []item{at(tombstone("a"), 10, 1), at(up("a", 2, "y"), 11, 1)},
			outcomes:  []Outcome{OutcomeStale, OutcomeRedelivered},
			final:     map[string]State{"a": {Version: 2, ContentHash: "hash-y"}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{1}, Offset: 11}},
			ledger:    []string{"document:a:v2:upsert"},
		},
		{
			name:      "a redelivery never moves the position back",
			stored:    map[string]State{"a": stored(State{Version: 2, ContentHash: "hash-y"}, 11, 1)},
			items:     []item{at(up("a", 2, "y"), 4, 1)},
			outcomes:  []Outcome{OutcomeRedelivered},
			final:     map[string]State{"a": {Version: 2, ContentHash: "hash-y"}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{1}, Offset: 11}},
			ledger:    []string{"document:a:v2:upsert"},
		},
		{
			name:      "the same event published again leaves the position",
			stored:    map[string]State{"a": stored(State{Version: 2, ContentHash: "hash-y"}, 11, 1)},
			items:     []item{at(up("a", 2, "y"), 14, 1), at(wd("a", 2), 15, 1), at(wd("a", 2), 16, 1)},
			outcomes:  []Outcome{OutcomeRedelivered, OutcomeWithdrawn, OutcomeWithdrawn},
			final:     map[string]State{"a": {Version: 2, Withdrawn: true}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{1}, Offset: 15}},
			ledger:    []string{"document:a:v2:upsert", "document:a:v2:withdraw"},
		},
		{
			name:   "a tombstone from another partition withdraws",
			stored: map[string]State{"a": stored(State{Version: 3, ContentHash: "hash-x"}, 7, 1)},
			items: []item{func() item {
				it := at(tombstone("a"), 2, 1)
				it.pos.Partition = 1
				return it
			}()},
			outcomes:  []Outcome{OutcomeWithdrawn},
			final:     map[string]State{"a": {Version: 3, Withdrawn: true}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{1}, Partition: 1, Offset: 2}},
			ledger:    []string{"document:a:v3:withdraw"},
		},
		{
			name:      "a tombstone of a topic created again withdraws",
			stored:    map[string]State{"a": stored(State{Version: 3, ContentHash: "hash-x"}, 7, 1)},
			items:     []item{at(tombstone("a"), 2, 2)},
			outcomes:  []Outcome{OutcomeWithdrawn},
			final:     map[string]State{"a": {Version: 3, Withdrawn: true}},
			positions: map[string]Position{"a": {Topic: "t", TopicID: TopicID{2}, Offset: 2}},
			ledger:    []string{"document:a:v3:withdraw"},
		},
		{
			name:      "an unknown topic id compares by topic name",
			stored:    map[string]State{"a": stored(State{Version: 3, ContentHash: "hash-x"}, 7, 0)},
			items:     []item{at(tombstone("a"), 2, 2)},
			outcomes:  []Outcome{OutcomeStale},
			final:     map[string]State{},
			positions: map[string]Position{},
		},
		{
			name:     "conflict goes to the dead-letter topic by default",
			stored:   map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			items:    []item{up("a", 1, "other")},
			outcomes: []Outcome{OutcomeConflict},
			final:    map[string]State{},
			letters:  []event.Reason{ReasonVersionConflict},
		},
		{
			name:     "conflict overwrite projects the new content",
			stored:   map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			policy:   ConflictOverwrite,
			items:    []item{up("a", 1, "other")},
			outcomes: []Outcome{OutcomeConflict},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-other"}},
			ledger:   []string{"document:a:v1:upsert"},
		},
		{
			name:      "conflict overwrite read again keeps the later content",
			stored:    map[string]State{"a": stored(State{Version: 1, ContentHash: "hash-later"}, 9, 1)},
			policy:    ConflictOverwrite,
			items:     []item{at(up("a", 1, "earlier"), 5, 1)},
			outcomes:  []Outcome{OutcomeConflict},
			final:     map[string]State{},
			positions: map[string]Position{},
		},
		{
			name:     "conflict within one batch",
			items:    []item{up("a", 1, "x"), up("a", 1, "y")},
			outcomes: []Outcome{OutcomeProjected, OutcomeConflict},
			final:    map[string]State{"a": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:a:v1:upsert"},
			letters:  []event.Reason{ReasonVersionConflict},
		},
		{
			name:     "bad input",
			items:    []item{{rec: &kgo.Record{}, bad: &event.Error{Reason: event.ReasonNotJSON}}, up("b", 1, "x")},
			outcomes: []Outcome{OutcomeDLQ, OutcomeProjected},
			final:    map[string]State{"b": {Version: 1, ContentHash: "hash-x"}},
			ledger:   []string{"document:b:v1:upsert"},
			letters:  []event.Reason{event.ReasonNotJSON},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := tt.policy
			if policy == "" {
				policy = ConflictDLQ
			}
			pl := fold(tt.stored, tt.items, policy, "w")
			var outcomes []Outcome
			for _, it := range tt.items {
				outcomes = append(outcomes, it.outcome)
			}
			if !reflect.DeepEqual(outcomes, tt.outcomes) {
				t.Errorf("outcomes = %v, want %v", outcomes, tt.outcomes)
			}
			final, positions := map[string]State{}, map[string]Position{}
			for _, k := range pl.order {
				st := pl.docs[k].State
				positions[k] = st.Position
				st.Position = Position{}
				final[k] = st
			}
			if !reflect.DeepEqual(final, tt.final) {
				t.Errorf("final = %v, want %v", final, tt.final)
			}
			if tt.positions != nil && !reflect.DeepEqual(positions, tt.positions) {
				t.Errorf("positions = %v, want %v", positions, tt.positions)
			}
			var ledger []string
			for _, l := range pl.ledger {
				ledger = append(ledger, l.IdempotencyKey)
			}
			if !reflect.DeepEqual(ledger, tt.ledger) {
				t.Errorf("ledger = %v, want %v", ledger, tt.ledger)
			}
			var letters []event.Reason
			for _, l := range pl.letters {
				letters = append(letters, l.Reason)
			}
			if !reflect.DeepEqual(letters, tt.letters) {
				t.Errorf("letters = %v, want %v", letters, tt.letters)
			}
		})
	}
}
