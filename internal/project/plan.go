package project

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/event"
	"github.com/projector/projector/internal/keys"
)

// Outcome is what became of one record; it is the label of
// projector_records_total.
type Outcome string

// The outcomes of a record.
const (
	// OutcomeProjected: a new version (or a first one) was written.
	OutcomeProjected Outcome = "projected"
	// OutcomeRedelivered: the stored version with the same content arrived
	// again; its writes were repeated, reaching the same state.
	OutcomeRedelivered Outcome = "redelivered"
	// OutcomeStale: an older version than the stored one; nothing written.
	OutcomeStale Outcome = "stale"
	// OutcomeWithdrawn: the document was removed from all stores.
	OutcomeWithdrawn Outcome = "withdrawn"
	// OutcomeConflict: the stored version arrived with other content; the
	// conflict policy decided what happened.
	OutcomeConflict Outcome = "conflict"
	// OutcomeDLQ: bad input, sent to the dead-letter topic.
	OutcomeDLQ Outcome = "dlq"
)

// ConflictPolicy decides what a version conflict does.
type ConflictPolicy string

const (
	// ConflictDLQ keeps the stored content and sends the conflicting record
	// to the dead-letter topic with reason version_conflict. The default: a
	// source that reuses a version number has a bug, and the first content
	// is the one other systems may already have read.
	ConflictDLQ ConflictPolicy = "dlq"
	// ConflictOverwrite projects the new content under the same version.
	ConflictOverwrite ConflictPolicy = "overwrite"
)

// Reasons the projector itself gives dead letters, beside the decoder's.
const (
	ReasonVersionConflict event.Reason = "version_conflict"
	ReasonFenceMismatch   event.Reason = "fence_mismatch"
	ReasonStoreRejected   event.Reason = "store_rejected"
	// ReasonInvalidPosition: a projector-original-position header that
	// does not parse (HeaderOriginalPosition).
	ReasonInvalidPosition event.Reason = "invalid_position"
)

// item is one record of a batch and what became of it.
type item struct {
	rec *kgo.Record
	// topicID is the id of rec's topic, zero when unknown.
	topicID TopicID
	// pos is where the record is judged: its place in the log, or the
	// earlier one it was redriven from (judgedAt).
	pos Position
	ev  event.Event
	// bad is set when the record is bad input.
	bad *event.Error
	// outcome is set by plan.
	outcome Outcome
	// storedHash is the content hash a conflicting record collided with.
	storedHash string
	// reason says why a record that is not bad input was dead-lettered.
	reason event.Reason
}

// letter is the dead letter of the item's record.
func (it *item) letter(reason event.Reason, detail string) DeadLetter {
	return DeadLetter{Record: it.rec, TopicID: it.topicID, Reason: reason, Detail: detail}
}

// docState is a document's state while a batch is folded over it.
type docState struct {
	State
	known   bool
	touched bool
	// live is the event whose content is current, once the batch wrote it.
	live *event.Event
}

// plan is the net effect of a batch.
type plan struct {
	// order lists touched documents in the order they were first touched.
	order  []string
	docs   map[string]*docState
	ledger []LedgerEntry
	// letters are the records to dead-letter, in offset order.
	letters []DeadLetter
}

// fold applies the records of a batch one by one, in offset order, to the
// stored states, the way handling them singly would, and keeps only the net
// result: the final state of each touched document and one ledger entry per
// applied event. Writing that result once gives the same stores as writing
// every record in turn, and no store row is touched twice by one statement.
func fold(states map[string]State, items []item, policy ConflictPolicy, writer string) *plan {
	p := &plan{docs: map[string]*docState{}}
	ledgerAt := map[string]int{}
	for i := range items {
		it := &items[i]
		if it.bad != nil {
			it.outcome = OutcomeDLQ
			p.letters = append(p.letters, it.letter(it.bad.Reason, it.bad.Detail))
			continue
		}
		ev := &it.ev
		st := p.docs[ev.Key]
		if st == nil {
			stored, known := states[ev.Key]
			st = &docState{State: stored, known: known}
			p.docs[ev.Key] = st
		}
		version := ev.Version
		switch {
		case ev.Tombstone && st.known && st.Position.covers(it.pos):
			// Read again after the event that last changed the document
			// (a redelivery, a replay): it was applied, or found stale,
			// the first time, and must not withdraw a later revival.
			it.outcome = OutcomeStale
		case ev.Tombstone:
			// A tombstone withdraws the version current at its place in
			// the log.
			version = st.Version
			it.outcome = OutcomeWithdrawn
		case ev.Op == keys.OpWithdraw:
			if st.known && version < st.Version {
				it.outcome = OutcomeStale
			} else {
				it.outcome = OutcomeWithdrawn
			}
		case st.known && st.Withdrawn && version <= st.Version:
			// Only a higher version revives a withdrawn document.
			it.outcome = OutcomeStale
		case st.known && version < st.Version:
			it.outcome = OutcomeStale
		case st.known && version == st.Version && ev.ContentHash == st.ContentHash:
			it.outcome = OutcomeRedelivered
		case st.known && version == st.Version:
			it.outcome = OutcomeConflict
			it.storedHash = st.ContentHash
			if policy == ConflictOverwrite && st.Position.covers(it.pos) {
				// Read again: the stored content came from a later event
				// of the same version, which overwrote this one.
				continue
			}
			if policy != ConflictOverwrite {
				it.reason = ReasonVersionConflict
				p.letters = append(p.letters, it.letter(ReasonVersionConflict,
					"version "+strconv.FormatInt(version, 10)+" is stored with content hash "+st.ContentHash+"; this record has "+ev.ContentHash))
				continue
			}
		default:
			it.outcome = OutcomeProjected
		}
		if it.outcome == OutcomeStale {
			continue
		}

		if !st.touched {
			st.touched = true
			p.order = append(p.order, ev.Key)
		}
		before, wasKnown := st.State, st.known
		st.known = true
		st.Version = version
		op := keys.OpUpsert
		chunkCount := len(ev.Chunks)
		if it.outcome == OutcomeWithdrawn {
			op = keys.OpWithdraw
			chunkCount = 0
			st.Withdrawn, st.ContentHash, st.live = true, "", nil
		} else {
			st.Withdrawn, st.ContentHash, st.live = false, ev.ContentHash, ev
		}
		if !wasKnown || before.Version != st.Version || before.Withdrawn != st.Withdrawn || before.ContentHash != st.ContentHash {
			// Only an event that changes the document moves its position:
			// the same event published again leaves every row as it was.
			st.Position = before.Position.advance(it.pos)
		}
		entry := LedgerEntry{
			IdempotencyKey: keys.IdempotencyKey(ev.Key, version, op),
			DocumentKey:    ev.Key,
			Version:        version,
			Op:             op,
			ContentHash:    st.ContentHash,
			ChunkCount:     chunkCount,
			Topic:          it.rec.Topic,
			Partition:      it.rec.Partition,
			Offset:         it.rec.Offset,
			CorrelationID:  ev.CorrelationID,
			Writer:         writer,
		}
		if j, ok := ledgerAt[entry.IdempotencyKey]; ok {
			// The same event twice in one batch: keep where it was first
			// seen, and the content it ends with (an overwrite changes it).
			p.ledger[j].ContentHash, p.ledger[j].ChunkCount = entry.ContentHash, entry.ChunkCount
			continue
		}
		ledgerAt[entry.IdempotencyKey] = len(p.ledger)
		p.ledger = append(p.ledger, entry)
	}
	return p
}
