package redrive

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A redrive group's position in a partition of the dead-letter topic is
// the committed offset, below which every letter was sent (or can never be:
// a cut letter whose whole record is gone), and marks, kept in the commit's
// metadata: each says that every letter below its offset that its
// selection matches was sent. So the position never passes a letter the
// selection did not send, for another selection of the same group to send,
// and a rerun of a selection still sends nothing twice: it reads from the
// committed offset and skips what the marks cover.

// mark is one selection's progress in a partition.
type mark struct {
	Reasons []string  `json:"reasons,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	From    int64     `json:"from,omitempty"`
	To      int64     `json:"to"`
	// Below: every letter below it that the selection matches was sent.
	Below int64 `json:"below"`
}

func markOf(sel Selection, below int64) mark {
	return mark{Reasons: sel.Reasons, Since: sel.Since, Until: sel.Until, From: sel.From, To: sel.To, Below: below}
}

func (m mark) selection() Selection {
	return Selection{Reasons: m.Reasons, Since: m.Since, Until: m.Until, From: m.From, To: m.To}
}

func (m mark) sameSelection(o mark) bool {
	return slices.Equal(m.Reasons, o.Reasons) && m.Since.Equal(o.Since) && m.Until.Equal(o.Until) && m.From == o.From && m.To == o.To
}

// position is a group's place in one partition.
type position struct {
	// committed: every letter below it was sent, or can never be.
	committed int64
	marks     []mark
}

// positionMetadata is the commit metadata of a position.
type positionMetadata struct {
	Version int    `json:"projector_redrive"`
	Sent    []mark `json:"sent,omitempty"`
}

// maxMetadataBytes keeps the metadata under the brokers' default
// offset.metadata.max.bytes (4096).
const maxMetadataBytes = 4000

// parsePosition reads a committed offset and its metadata. Metadata that is
// not a redrive's (a group committed by an older build, or by kadm) has no
// marks: the committed offset alone says what was sent.
func parsePosition(committed int64, metadata string) position {
	p := position{committed: committed}
	var md positionMetadata
	if json.Unmarshal([]byte(metadata), &md) == nil && md.Version == 1 {
		p.marks = md.Sent
	}
	return p
}

func (p position) metadata() (string, error) {
	if len(p.marks) == 0 {
		return "", nil
	}
	b, err := json.Marshal(positionMetadata{Version: 1, Sent: p.marks})
	if err != nil {
		return "", err
	}
	if len(b) > maxMetadataBytes {
		return "", fmt.Errorf("%w: the position holds %d selections' progress (%d bytes, over %d)", ErrPositionFull, len(p.marks), len(b), maxMetadataBytes)
	}
	return string(b), nil
}

// sent reports whether an earlier run of the group sent the letter r at or
// past the committed offset.
func (p position) sent(r *kgo.Record) bool {
	for _, m := range p.marks {
		if r.Offset < m.Below && m.selection().Match(r) {
			return true
		}
	}
	return false
}

// advance returns the position after a run of sel read every letter below
// next, from p.committed, and sent all that sel matched and p had not sent,
// but not the letter at firstUnsent (-1: none) nor the unmatched ones after
// it: the committed offset moves to the first letter left unsent, and a
// mark of sel says what it sent beyond.
func (p position) advance(sel Selection, next, firstUnsent int64) position {
	out := position{committed: next}
	if firstUnsent >= 0 {
		out.committed = firstUnsent
	}
	add := markOf(sel, next)
	merged := false
	for _, m := range p.marks {
		if m.sameSelection(add) {
			m.Below, merged = max(m.Below, next), true
		}
		if m.Below > out.committed {
			out.marks = append(out.marks, m)
		}
	}
	if !merged && add.Below > out.committed {
		out.marks = append(out.marks, add)
	}
	return out
}

// pruned drops the marks that say nothing past the committed offset.
func (p position) pruned() position {
	out := position{committed: p.committed}
	for _, m := range p.marks {
		if m.Below > p.committed {
			out.marks = append(out.marks, m)
		}
	}
	return out
}
