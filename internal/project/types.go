// Package project is the projection itself: it turns a batch of records of
// one partition into the net writes of the three stores and applies them in
// the fixed order index, graph, relational, then checks them with fences.
//
// It owns the semantics of the public contract's section 3 (stale versions,
// new versions, withdrawals, conflicts) and knows the stores only through the
// small interfaces declared here; the adapters live in internal/store/...
package project

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/keys"
)

// Document is a live document as every store must hold it after a batch:
// exactly these chunks, at this version.
type Document struct {
	Key     string
	Version int64
	// Position is where the event that last changed the document is.
	Position Position
	Title    string
	Source   string
	// Metadata holds JSON scalars only (string, bool, nil, int64, float64).
	Metadata      map[string]any
	ContentHash   string
	CorrelationID string
	Chunks        []Chunk
}

// Chunk is one chunk of a live document.
type Chunk struct {
	ID          uuid.UUID
	DocumentKey string
	Version     int64
	Ordinal     int
	Text        string
	Vector      []float32
	// Generation is the index generation whose embedder made Vector (an
	// event's own vector counts as the live generation's): the relational
	// store keeps it with the vector, so that a vector read back is
	// written to that generation only (Reembed). 0: no generation, in a
	// write of no generation set (tests), or a row the projector did not
	// write, whose vector is embedded again for any generation.
	Generation int
	// Metadata is the chunk's own metadata (JSON scalars), may be nil.
	Metadata map[string]any
}

// Withdrawal is a document that no store may hold any more. The relational
// store remembers Version, so a replayed older upsert stays stale, and
// Position, so a tombstone read again stays stale.
type Withdrawal struct {
	Key      string
	Version  int64
	Position Position
}

// TopicID is Kafka's id of a topic. A topic deleted and created again
// under the same name gets a new id and restarts its offsets, so offsets
// only compare under one id. The zero TopicID is unknown (brokers before
// Kafka 3.1 do not send it in fetches).
type TopicID [16]byte

// Position is an event's place in the log: the offset of a partition of
// one topic. The relational store keeps, per document, the position of the
// event that last changed it; a tombstone carries no version, and its
// position is what tells a tombstone read again (a redelivery, a replay)
// from a new one.
type Position struct {
	Topic     string
	TopicID   TopicID
	Partition int32
	Offset    int64
}

// sameLog reports whether p and q are offsets of one partition of one
// topic, so that their offsets order them. Positions in different
// partitions (a document whose key moved when the partition count grew)
// or in different incarnations of a topic are not ordered. An unknown
// topic id matches any id of the same name.
func (p Position) sameLog(q Position) bool {
	if p.Topic != q.Topic || p.Partition != q.Partition {
		return false
	}
	return p.TopicID == TopicID{} || q.TopicID == TopicID{} || p.TopicID == q.TopicID
}

// same reports whether p and q are one place of one log.
func (p Position) same(q Position) bool { return p.sameLog(q) && p.Offset == q.Offset }

// covers reports whether q is at or before p in the same log: an event at
// q was already read when the document was last changed at p.
func (p Position) covers(q Position) bool {
	return p.Topic != "" && p.sameLog(q) && q.Offset <= p.Offset
}

// advance returns the position of a document last changed at p once the
// event at q is applied: q, unless q is before p in the same log (an older
// event read again never moves the position back).
func (p Position) advance(q Position) Position {
	if p.covers(q) {
		return p
	}
	return q
}

// Fence is a writer's claim on a partition: the token the relational
// store gave it when the partition was assigned to it
// (postgres.Store.AcquireFence), which grows with every assignment. The
// relational store and the graph refuse, in the write's own transaction, a
// write whose token is older than the newest they have seen for the
// partition, so a member that lost its partition and writes on cannot
// move either back. The zero Fence (Token 0) claims nothing and is not
// checked: reconcile's repairs, which hold the repair lease instead, and
// unit tests.
type Fence struct {
	Topic     string
	Partition int32
	Token     int64
	// LateUntil is until when an index write of an earlier owner of the
	// partition may still land, by this process's clock: the index checks
	// no token, so a member that lost the partition can write it after
	// this owner did, until the bound of its own writes runs out
	// (Config.IndexWriteTimeout). The zero time: no earlier owner can
	// write any more (it released the partition, or there was none).
	// Until then the relational store records the documents this owner
	// writes (Write.Settle), and at LateUntil the owner settles the index
	// for them (Projector.Settle).
	LateUntil time.Time
}

// Write is the net effect of a batch: after it, every store holds exactly
// the chunks of Live and nothing of Withdrawn. Within one Write a document
// key appears once.
type Write struct {
	Live      []Document
	Withdrawn []Withdrawal
	// Fence is the writer's claim on the partition of the documents.
	Fence Fence
	// Exact makes the index take the write as the documents' whole state:
	// it replaces and removes whatever points it holds of them, whatever
	// event they are of. Ordinary writes only move a document forward in
	// its log, so they cannot remove the points of a later event that a
	// writer which lost the partition (or died before its relational
	// write) left there; the owner's re-projection after a fence mismatch
	// and its settle write exactly. The graph and the relational store
	// write it as any other.
	Exact bool
	// Settle asks the relational store to record the documents of the
	// write for the partition's settle: the write is made while an earlier
	// owner's index write may still land over it (Fence.LateUntil).
	Settle bool
	// Epoch is the epoch of the set of index generations the write's index
	// step wrote (Generations); the relational store refuses the write
	// when the registry's epoch is another (a *GenerationsChangedError).
	// 0 is not checked: writes of no generation set (repairs, tests).
	Epoch int64
}

// Keys returns every document key of the write, live ones first.
func (w *Write) Keys() []string {
	out := make([]string, 0, len(w.Live)+len(w.Withdrawn))
	for _, d := range w.Live {
		out = append(out, d.Key)
	}
	for _, d := range w.Withdrawn {
		out = append(out, d.Key)
	}
	return out
}

// Expected returns, per document key, the exact chunk ids the stores must
// hold after the write (none for a withdrawn document).
func (w *Write) Expected() map[string][]uuid.UUID {
	out := make(map[string][]uuid.UUID, len(w.Live)+len(w.Withdrawn))
	for _, d := range w.Live {
		ids := make([]uuid.UUID, len(d.Chunks))
		for i, c := range d.Chunks {
			ids[i] = c.ID
		}
		out[d.Key] = ids
	}
	for _, d := range w.Withdrawn {
		out[d.Key] = nil
	}
	return out
}

// Empty reports whether the write changes nothing.
func (w *Write) Empty() bool { return len(w.Live) == 0 && len(w.Withdrawn) == 0 }

// LedgerEntry records that an event was applied to all three stores. It is
// written in the relational transaction, so its presence proves the index
// and graph writes before it were acknowledged.
type LedgerEntry struct {
	IdempotencyKey string
	DocumentKey    string
	Version        int64
	Op             keys.Op
	ContentHash    string
	ChunkCount     int
	Topic          string
	Partition      int32
	Offset         int64
	CorrelationID  string
	// Writer names the projector process that applied the event, so the
	// ledger shows which process wrote which partition's offsets.
	Writer string
}

// State is what the relational store remembers of a document; it decides
// whether an event is new, a redelivery, stale or a conflict.
type State struct {
	Version     int64
	Withdrawn   bool
	ContentHash string
	// Position is where the event that last changed the document is; the
	// zero Position (no Topic) when unknown.
	Position Position
}

// Index is the vector index (Qdrant), written first.
type Index interface {
	// Apply upserts the chunks of w.Live, then removes every other chunk of
	// the documents of w, including all chunks of w.Withdrawn; only
	// forward in each document's log unless w.Exact.
	Apply(ctx context.Context, w *Write) error
	// Points returns, per document key, the points the index holds of it
	// with the event each is of; keys without points may be absent.
	Points(ctx context.Context, keys []string) (map[string][]Point, error)
}

// Point is one point of the index as the settle compares it with the
// relational store: its chunk id and the event it was written from.
type Point struct {
	ID       uuid.UUID
	Version  int64
	Position Position
}

// Graph is the graph store (Neo4j), written second.
type Graph interface {
	// Apply merges documents and chunks of w.Live with their HAS_CHUNK
	// relationships, then removes every other chunk of those documents and
	// the documents of w.Withdrawn with their chunks.
	Apply(ctx context.Context, w *Write) error
}

// Relational is the relational store (PostgreSQL), written last; it is also
// the decision store, and the keeper of the partitions' fencing tokens.
type Relational interface {
	// States returns the stored state of the given documents; unknown
	// documents are absent from the map. With a fence (Token > 0) it
	// first checks that no newer writer holds the partition, and returns
	// a *FencedError if one does.
	States(ctx context.Context, fence Fence, keys []string) (map[string]State, error)
	// CheckFence returns a *FencedError when the partition has a newer
	// writer than fence. Every index write of a fenced writer follows one
	// (see Config.IndexWriteTimeout): the index cannot check a token.
	CheckFence(ctx context.Context, fence Fence) error
	// Apply writes documents, chunks, removals and the ledger entries in one
	// transaction, and with w.Settle records the documents for the
	// partition's settle.
	Apply(ctx context.Context, w *Write, ledger []LedgerEntry) error
}

// Settlement is what the settle reads and forgets of the relational
// store: the documents recorded for a partition's settle (Write.Settle),
// by this owner and by earlier ones that did not settle.
type Settlement interface {
	// Unsettled returns up to limit recorded documents of fence's
	// partition after the key after, in key order; a *FencedError when
	// the partition has a newer writer.
	Unsettled(ctx context.Context, fence Fence, after string, limit int) ([]string, error)
	// Reprojection returns the write that projects the current state of
	// keys, as reconcile's repair reads it; live documents whose chunk
	// rows are incomplete are left out and named in incomplete.
	Reprojection(ctx context.Context, keys []string) (w *Write, incomplete map[string][]int, err error)
	// Settled forgets keys of fence's partition, in a transaction that
	// refuses a fence that is not the newest.
	Settled(ctx context.Context, fence Fence, keys []string) error
}

// Embedder computes vectors for chunks that carry none.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dim() int
}
