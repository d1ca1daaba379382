package reconcile

import (
	"slices"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/keys"
)

// MaxIDs bounds the ids a discrepancy lists of each kind; the counts are
// always complete.
const MaxIDs = 10

// Statuses of a document in the decision store, as a discrepancy reports it.
const (
	StatusLive      = "live"
	StatusWithdrawn = "withdrawn"
	// StatusUnknown: the decision store has no document of that key.
	StatusUnknown = "unknown"
)

// Discrepancy is one class of disagreement of one store about one document.
type Discrepancy struct {
	Store string `json:"store"`
	Class Class  `json:"class"`
	Key   string `json:"document_key"`
	// Status and Version are the decision store's.
	Status  string `json:"status"`
	Version int64  `json:"version,omitempty"`
	// Want is the number of chunks the store must hold; Held the number of
	// chunks it holds of the document.
	Want int `json:"want_chunks"`
	Held int `json:"held_chunks"`
	// StoreVersions are the other versions the store holds the document at.
	StoreVersions []int64 `json:"store_versions,omitempty"`
	// Missing counts the ids the store lacks, Extra the ids it holds that
	// it must not; MissingIDs and ExtraIDs list the first MaxIDs of each.
	Missing    int         `json:"missing"`
	Extra      int         `json:"extra"`
	MissingIDs []uuid.UUID `json:"missing_ids,omitempty"`
	ExtraIDs   []uuid.UUID `json:"extra_ids,omitempty"`
	// NoRecord is set when the store lacks its record of the document
	// itself (the graph's Document node).
	NoRecord bool `json:"no_document_record,omitempty"`
	// Action says what this run did about it: empty when nothing.
	Action Action `json:"action,omitempty"`
	// Note explains an action that could not be taken.
	Note string `json:"note,omitempty"`
}

// Action is what a run did about a discrepancy.
type Action string

// The actions of a run.
const (
	// Reprojected: the document was projected again from the relational
	// copy, in the write order, into every store.
	Reprojected Action = "reprojected"
	// Deleted: the chunks of an unknown document were deleted.
	Deleted Action = "deleted"
	// Unrepairable: the relational copy cannot rebuild the document.
	Unrepairable Action = "unrepairable"
)

// Resolved reports whether the run fixed the discrepancy.
func (d *Discrepancy) Resolved() bool { return d.Action == Reprojected || d.Action == Deleted }

// compare classifies what store holds of one document against the
// decision store's record of it. It returns at most one discrepancy per
// class; a document whose store agrees returns none.
func compare(store string, d Decision, h Holding) []Discrepancy {
	base := Discrepancy{Store: store, Key: d.Key, Status: StatusLive, Version: d.Version, Held: len(h.Chunks)}
	if d.Withdrawn {
		if len(h.Chunks) == 0 && !h.Present {
			return nil
		}
		base.Status, base.Class = StatusWithdrawn, WithdrawnPresent
		base.StoreVersions = versionsOf(h, 0)
		base.setExtra(idsOf(h.Chunks))
		return []Discrepancy{base}
	}
	want := keys.ChunkIDs(d.Key, d.Version, d.ChunkCount)
	base.Want = len(want)
	expected := make(map[uuid.UUID]bool, len(want))
	for _, id := range want {
		expected[id] = true
	}
	held := make(map[uuid.UUID]bool, len(h.Chunks))
	var skewed, orphans []uuid.UUID
	for _, c := range h.Chunks {
		switch {
		case c.Version != 0 && c.Version != d.Version:
			skewed = append(skewed, c.ID)
		case expected[c.ID]:
			// A detached graph chunk is not held: it counts as missing,
			// and re-applying the document links it again.
			if !c.Detached {
				held[c.ID] = true
			}
		default:
			orphans = append(orphans, c.ID)
		}
	}
	var missing []uuid.UUID
	for _, id := range want {
		if !held[id] {
			missing = append(missing, id)
		}
	}
	noRecord := h.Records && !h.Present
	var out []Discrepancy
	switch {
	case len(skewed) > 0 || (h.Records && h.Present && h.Version != d.Version):
		// The store is at another version: the ids it lacks are the
		// consequence, reported with the skew rather than as a class of
		// their own.
		sk := base
		sk.Class, sk.StoreVersions = VersionSkew, versionsOf(h, d.Version)
		sk.setMissing(missing)
		sk.setExtra(skewed)
		out = append(out, sk)
	case len(missing) > 0 || noRecord:
		m := base
		m.Class, m.NoRecord = Missing, noRecord
		m.setMissing(missing)
		out = append(out, m)
	}
	if len(orphans) > 0 {
		o := base
		o.Class = Orphaned
		o.setExtra(orphans)
		out = append(out, o)
	}
	return out
}

// unknown is the discrepancy of a store holding a document the decision
// store does not know.
func unknown(store, key string, h Holding) Discrepancy {
	d := Discrepancy{Store: store, Class: Orphaned, Key: key, Status: StatusUnknown, Held: len(h.Chunks),
		StoreVersions: versionsOf(h, 0)}
	d.setExtra(idsOf(h.Chunks))
	return d
}

func (d *Discrepancy) setMissing(ids []uuid.UUID) {
	d.Missing, d.MissingIDs = len(ids), firstIDs(ids)
}

func (d *Discrepancy) setExtra(ids []uuid.UUID) {
	d.Extra, d.ExtraIDs = len(ids), firstIDs(ids)
}

func firstIDs(ids []uuid.UUID) []uuid.UUID {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return out[:min(len(out), MaxIDs)]
}

func idsOf(chunks []Held) []uuid.UUID {
	out := make([]uuid.UUID, len(chunks))
	for i, c := range chunks {
		out[i] = c.ID
	}
	return out
}

// versionsOf returns, sorted, the versions the store holds the document at
// other than current (0: every version it records).
func versionsOf(h Holding, current int64) []int64 {
	var out []int64
	add := func(v int64) {
		if v != 0 && v != current && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if h.Records && h.Present {
		add(h.Version)
	}
	for _, c := range h.Chunks {
		add(c.Version)
	}
	slices.Sort(out)
	return out
}
