package index

import (
	"cmp"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/projector/projector/internal/project"
)

// The filters of a write (each upsert's update_filter, the delete of the
// points it makes obsolete) are encoded here in protobuf's wire format,
// as the points are (wire.go): built as qdrant.Filter messages they were a
// dozen messages per document and one per chunk (the ids to keep), and a
// tenth of the projector's CPU went to building and encoding them.
// filter_test.go holds the bytes equal, decoded, to the messages they
// replace.

// Field numbers of Qdrant's filter protos (points.proto of qdrant-client
// 1.17).
const (
	upsertUpdateFilter  = 6 // UpsertPoints.update_filter
	deletePointsPoints  = 3 // DeletePoints.points
	selectorFilter      = 2 // PointsSelector.filter
	filterShould        = 1 // Filter.should
	filterMust          = 2 // Filter.must
	filterMustNot       = 3 // Filter.must_not
	conditionField      = 1 // Condition.field
	conditionIsEmpty    = 2 // Condition.is_empty
	conditionHasID      = 3 // Condition.has_id
	conditionFilter     = 4 // Condition.filter
	fieldConditionKey   = 1 // FieldCondition.key
	fieldConditionMatch = 2 // FieldCondition.match
	fieldConditionRange = 3 // FieldCondition.range
	matchKeyword        = 1 // Match.keyword
	matchInteger        = 2 // Match.integer
	matchKeywords       = 5 // Match.keywords, RepeatedStrings
	repeatedStrings     = 1 // RepeatedStrings.strings
	rangeLt             = 1 // Range.lt
	rangeLte            = 4 // Range.lte
	isEmptyKey          = 1 // IsEmptyCondition.key
	hasIDIDs            = 1 // HasIdCondition.has_id
)

// appendMessage appends field num holding the message fill appends. The
// length goes before the contents, which fill writes first: one byte is
// kept for it, and the contents move when their length needs more.
func appendMessage(b []byte, num protowire.Number, fill func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = append(b, 0)
	start := len(b)
	b = fill(b)
	n := len(b) - start
	if extra := protowire.SizeVarint(uint64(n)) - 1; extra > 0 {
		b = append(b, make([]byte, extra)...)
		copy(b[start+extra:], b[start:start+n])
	}
	protowire.AppendVarint(b[start-1:start-1], uint64(n))
	return b
}

// appendFieldCondition appends a Condition on the payload field key; fill
// appends the rest of its FieldCondition (a match or a range).
func appendFieldCondition(b []byte, num protowire.Number, key string, fill func([]byte) []byte) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		return appendMessage(b, conditionField, func(b []byte) []byte {
			b = protowire.AppendTag(b, fieldConditionKey, protowire.BytesType)
			return fill(protowire.AppendString(b, key))
		})
	})
}

// appendMatchKeyword appends the Condition key = value.
func appendMatchKeyword(b []byte, num protowire.Number, key, value string) []byte {
	return appendFieldCondition(b, num, key, func(b []byte) []byte {
		return appendMessage(b, fieldConditionMatch, func(b []byte) []byte {
			return protowire.AppendString(protowire.AppendTag(b, matchKeyword, protowire.BytesType), value)
		})
	})
}

// appendMatchKeywords appends the Condition key in values.
func appendMatchKeywords(b []byte, num protowire.Number, key string, values []string) []byte {
	return appendFieldCondition(b, num, key, func(b []byte) []byte {
		return appendMessage(b, fieldConditionMatch, func(b []byte) []byte {
			return appendMessage(b, matchKeywords, func(b []byte) []byte {
				for _, v := range values {
					b = protowire.AppendString(protowire.AppendTag(b, repeatedStrings, protowire.BytesType), v)
				}
				return b
			})
		})
	})
}

// appendMatchInt appends the Condition key = value.
func appendMatchInt(b []byte, num protowire.Number, key string, value int64) []byte {
	return appendFieldCondition(b, num, key, func(b []byte) []byte {
		return appendMessage(b, fieldConditionMatch, func(b []byte) []byte {
			return protowire.AppendVarint(protowire.AppendTag(b, matchInteger, protowire.VarintType), uint64(value))
		})
	})
}

// appendRange appends the Condition key < value (bound rangeLt) or
// key <= value (rangeLte).
func appendRange(b []byte, num protowire.Number, key string, bound protowire.Number, value float64) []byte {
	return appendFieldCondition(b, num, key, func(b []byte) []byte {
		return appendMessage(b, fieldConditionRange, func(b []byte) []byte {
			return protowire.AppendFixed64(protowire.AppendTag(b, bound, protowire.Fixed64Type), math.Float64bits(value))
		})
	})
}

// appendIsEmpty appends the Condition that key is empty.
func appendIsEmpty(b []byte, num protowire.Number, key string) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		return appendMessage(b, conditionIsEmpty, func(b []byte) []byte {
			return protowire.AppendString(protowire.AppendTag(b, isEmptyKey, protowire.BytesType), key)
		})
	})
}

// appendFilterCondition appends a Condition holding the Filter fill
// appends.
func appendFilterCondition(b []byte, num protowire.Number, fill func([]byte) []byte) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		return appendMessage(b, conditionFilter, fill)
	})
}

// appendHasID appends the Condition that a point is one of d's chunks.
func appendHasID(b []byte, num protowire.Number, d *project.Document) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		return appendMessage(b, conditionHasID, func(b []byte) []byte {
			for i := range d.Chunks {
				b = appendPointID(b, hasIDIDs, d.Chunks[i].ID)
			}
			return b
		})
	})
}

// appendReplaceable appends, as field num, the condition on a stored point
// that a write of the event at pos may replace it: the point's event is at
// or before pos in the same log, or not ordered with it (no position
// stored, another topic or partition, another incarnation of the topic).
// Nothing when pos is unknown: any point may be replaced, as before
// positions were stored.
func appendReplaceable(b []byte, num protowire.Number, pos project.Position) []byte {
	if pos.Topic == "" {
		return b
	}
	return appendFilterCondition(b, num, func(b []byte) []byte {
		b = appendIsEmpty(b, filterShould, fieldOffset)
		b = appendFilterCondition(b, filterShould, func(b []byte) []byte {
			return appendMatchKeyword(b, filterMustNot, fieldTopic, pos.Topic)
		})
		b = appendFilterCondition(b, filterShould, func(b []byte) []byte {
			return appendMatchInt(b, filterMustNot, fieldPartition, int64(pos.Partition))
		})
		b = appendRange(b, filterShould, fieldOffset, rangeLte, float64(pos.Offset))
		if id := topicID(pos); id != "" {
			b = appendFilterCondition(b, filterShould, func(b []byte) []byte {
				b = appendIsEmpty(b, filterMustNot, fieldTopicID)
				return appendMatchKeyword(b, filterMustNot, fieldTopicID, id)
			})
		}
		return b
	})
}

// appendDocReplace appends, as a should of an upsert's update_filter, the
// condition that a stored point of d may be replaced by d's write.
func appendDocReplace(b []byte, d *project.Document) []byte {
	return appendFilterCondition(b, filterShould, func(b []byte) []byte {
		b = appendMatchKeyword(b, filterMust, "document_key", d.Key)
		return appendReplaceable(b, filterMust, d.Position)
	})
}

// appendUpdateFilter appends an upsert's update_filter, whose shoulds are
// the conditions appendDocReplace appended.
func appendUpdateFilter(b, shoulds []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, upsertUpdateFilter, protowire.BytesType), shoulds)
}

// appendDeleteFilter appends a DeletePoints' points selector: the filter
// fill appends.
func appendDeleteFilter(b []byte, fill func([]byte) []byte) []byte {
	return appendMessage(b, deletePointsPoints, func(b []byte) []byte {
		return appendMessage(b, selectorFilter, fill)
	})
}

// appendObsolete appends the filter of the points w makes obsolete: per
// document, its points of the written version, from the written event or
// an earlier one, that the write does not hold (a later event's points of
// the same version are not this write's to remove); per version written,
// its documents' older versions; per withdrawal version, its documents'
// versions up to it.
func appendObsolete(b []byte, w *project.Write) []byte {
	for i := range w.Live {
		d := &w.Live[i]
		b = appendFilterCondition(b, filterShould, func(b []byte) []byte {
			b = appendMatchKeyword(b, filterMust, "document_key", d.Key)
			b = appendMatchInt(b, filterMust, "version", d.Version)
			b = appendReplaceable(b, filterMust, d.Position)
			if len(d.Chunks) > 0 {
				b = appendHasID(b, filterMustNot, d)
			}
			return b
		})
	}
	for _, group := range byVersion(w.Live, func(d project.Document) (string, int64) { return d.Key, d.Version }) {
		b = appendVersionClause(b, group.keys, rangeLt, group.version)
	}
	for _, group := range byVersion(w.Withdrawn, func(d project.Withdrawal) (string, int64) { return d.Key, d.Version }) {
		b = appendVersionClause(b, group.keys, rangeLte, group.version)
	}
	return b
}

// appendVersionClause appends the should: document_key in keys, and
// version below (rangeLt) or up to (rangeLte) version.
func appendVersionClause(b []byte, keys []string, bound protowire.Number, version int64) []byte {
	return appendFilterCondition(b, filterShould, func(b []byte) []byte {
		b = appendMatchKeywords(b, filterMust, "document_key", keys)
		return appendRange(b, filterMust, "version", bound, float64(version))
	})
}

// versionGroup is the keys of a write's documents of one version.
type versionGroup struct {
	version int64
	keys    []string
}

// byVersion groups the keys of docs by version, in the order of versions.
func byVersion[D any](docs []D, of func(D) (string, int64)) []versionGroup {
	var groups []versionGroup
	for _, d := range docs {
		key, v := of(d)
		i, found := slices.BinarySearchFunc(groups, v, func(g versionGroup, v int64) int { return cmp.Compare(g.version, v) })
		if !found {
			groups = slices.Insert(groups, i, versionGroup{version: v})
		}
		groups[i].keys = append(groups[i].keys, key)
	}
	return groups
}

// appendOthers appends the filter of every point of w's documents that w
// does not write: an exact write's removals.
func appendOthers(b []byte, w *project.Write) []byte {
	for i := range w.Live {
		d := &w.Live[i]
		b = appendFilterCondition(b, filterShould, func(b []byte) []byte {
			b = appendMatchKeyword(b, filterMust, "document_key", d.Key)
			if len(d.Chunks) > 0 {
				b = appendHasID(b, filterMustNot, d)
			}
			return b
		})
	}
	if len(w.Withdrawn) > 0 {
		keys := make([]string, len(w.Withdrawn))
		for i, d := range w.Withdrawn {
			keys[i] = d.Key
		}
		b = appendMatchKeywords(b, filterShould, "document_key", keys)
	}
	return b
}
