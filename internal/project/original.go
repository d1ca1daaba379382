package project

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/event"
)

// HeaderOriginalPosition names where a record redriven from the dead-letter
// topic first was in the log, as Position.String writes it. The projector
// judges such a record at that place rather than at the offset the redrive
// gave it: a tombstone dead-lettered before a later revival of its document
// is stale when it comes back, as it would have been had it never failed,
// and every copy of one redriven letter has the effect of one.
const HeaderOriginalPosition = "projector-original-position"

// maxPositionBytes bounds HeaderOriginalPosition: a topic name (at most 249
// bytes), a partition, an offset and a topic id with their separators.
const maxPositionBytes = 320

// String formats a topic id as Kafka's tools print it (kafka-topics.sh
// --describe): URL-safe base64 without padding.
func (id TopicID) String() string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// ParseTopicID reads a topic id written by TopicID.String.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("topic id %q: want 22 characters of URL-safe base64, as kafka-topics.sh prints it", s)
	}
	copy(id[:], b)
	return id, nil
}

// String formats p as topic/partition/offset, followed by /topic-id when
// the id is known. Kafka topic names cannot hold a slash.
func (p Position) String() string {
	s := p.Topic + "/" + strconv.Itoa(int(p.Partition)) + "/" + strconv.FormatInt(p.Offset, 10)
	if p.TopicID != (TopicID{}) {
		s += "/" + p.TopicID.String()
	}
	return s
}

// ParsePosition reads a position written by Position.String.
func ParsePosition(s string) (Position, error) {
	var p Position
	if len(s) > maxPositionBytes {
		return p, fmt.Errorf("position is %d bytes, over the limit of %d", len(s), maxPositionBytes)
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 && len(parts) != 4 || parts[0] == "" {
		return p, fmt.Errorf("position %q: want topic/partition/offset[/topic-id]", s)
	}
	partition, err := strconv.ParseInt(parts[1], 10, 32)
	if err != nil || partition < 0 {
		return p, fmt.Errorf("position %q: the partition is not a number from 0", s)
	}
	offset, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || offset < 0 {
		return p, fmt.Errorf("position %q: the offset is not a number from 0", s)
	}
	p = Position{Topic: parts[0], Partition: int32(partition), Offset: offset}
	if len(parts) == 4 {
		if p.TopicID, err = ParseTopicID(parts[3]); err != nil {
			return Position{}, fmt.Errorf("position %q: %w", s, err)
		}
	}
	return p, nil
}

// judgedAt returns the place in the log at which the record r, read at pos,
// is judged: the earlier place of the same log its HeaderOriginalPosition
// names, or pos. A position in another log (another topic or partition, a
// topic created again since) cannot be ordered against the stored ones, and
// one at or after pos cannot be an original, so both leave pos. A header
// that does not parse is bad input: judged at pos, a redriven tombstone
// could withdraw a document revived after its original.
func judgedAt(r *kgo.Record, pos Position) (Position, *event.Error) {
	v := header(r, HeaderOriginalPosition)
	if v == "" {
		return pos, nil
	}
	orig, err := ParsePosition(v)
	if err != nil {
		return pos, &event.Error{Reason: ReasonInvalidPosition, Detail: "header " + HeaderOriginalPosition + ": " + err.Error()}
	}
	if !orig.sameLog(pos) || orig.Offset >= pos.Offset {
		return pos, nil
	}
	if pos.TopicID != (TopicID{}) {
		orig.TopicID = pos.TopicID
	}
	return orig, nil
}
