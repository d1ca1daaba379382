// Package reconcile compares the decision store (the relational documents
// table) with each of the three stores, per document and version, by exact
// chunk-id sets, in both directions, and repairs what it safely can by
// re-projecting from the relational copy, or from the log where that copy
// lacks chunk rows, in the fixed write order.
//
// It streams: documents are read in keyset pages by key, each page's
// holdings are read from every store by key while the page before it is
// compared, and meanwhile each store is scanned, page by page, for
// documents the decision store does not know. Memory is bounded by the
// page size (a few pages are held at once), plus, in a run that only
// reports, the keys of unknown documents each scan already reported (so a
// key that a store returns in two pages is reported once), at most
// Config.MaxUnknown a store.
//
// The stores are known only through the small interfaces declared here;
// the adapters implement them in internal/store/.../reconcile.go.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/projector/projector/internal/project"
)

// Class is the kind of a discrepancy.
type Class string

// The discrepancy classes, in report order.
const (
	// Missing: the decision store says the document is live at version v
	// with n chunks, and the store lacks some of the ids
	// keys.ChunkID(key, v, 0..n-1) (or, in the graph, the Document node).
	Missing Class = "missing"
	// Orphaned: the store holds chunk ids the projector never wrote for
	// the current state: chunks of a document the decision store does not
	// know, or ids of the current version that are not derived from it
	// (a second writer's). Chunks of other versions are VersionSkew.
	Orphaned Class = "orphaned"
	// VersionSkew: the store holds the document at another version than
	// the decision store (chunks, or the graph's Document node).
	VersionSkew Class = "version_skew"
	// WithdrawnPresent: a withdrawn document still has chunks (or a
	// Document node) in the store.
	WithdrawnPresent Class = "withdrawn_present"
)

// Classes lists every class, in report order.
var Classes = []Class{Missing, Orphaned, VersionSkew, WithdrawnPresent}

// Decision is a document as the decision store records it.
type Decision struct {
	Key        string
	Version    int64
	Withdrawn  bool
	ChunkCount int
}

// Held is one chunk a store holds of a document.
type Held struct {
	// ID is the chunk id; uuid.Nil for an id that is not a UUID.
	ID uuid.UUID
	// Version is the version the store records for the chunk; 0 when it
	// records none.
	Version int64
	// Detached marks a graph chunk node without a HAS_CHUNK relationship
	// from its document: present, but not held.
	Detached bool
}

// Holding is what one store holds of one document.
type Holding struct {
	Chunks []Held
	// Records is set by a store that keeps a record of the document itself
	// (the graph's Document node); Present and Version describe it.
	Records bool
	Present bool
	Version int64
}

// Page selects one keyset page of the decision store.
type Page struct {
	// After is the last key of the previous page ("" for the first).
	After string
	// Prefix keeps only keys that start with it.
	Prefix string
	// Since, when set, keeps only documents updated at or after it.
	Since time.Time
	Limit int
}

// Decisions is the decision store.
type Decisions interface {
	// Decisions returns up to p.Limit documents after p.After, in key order.
	Decisions(ctx context.Context, p Page) ([]Decision, error)
	// Known reports which keys the decision store has a document for.
	Known(ctx context.Context, keys []string) (map[string]bool, error)
}

// Store is one store as reconcile reads it.
type Store interface {
	// Name is the store's label: index, graph or relational.
	Name() string
	// Holdings returns what the store holds of each key; keys it holds
	// nothing of may be absent.
	Holdings(ctx context.Context, keys []string) (map[string]Holding, error)
	// ScanKeys calls fn with pages of at most pageSize distinct document
	// keys the store holds anything of, restricted to those starting with
	// prefix. A key may come in more than one page.
	ScanKeys(ctx context.Context, prefix string, pageSize int, fn func(keys []string) error) error
	// DeleteDocuments removes everything the store holds of documents the
	// decision store does not know.
	DeleteDocuments(ctx context.Context, keys []string) error
}

// Counter is a Store that can count what it holds, so that a run can tell
// without a scan that the store holds nothing of unknown documents: when
// the count equals what its reads by key returned for the decision store's
// documents, before and after them, no other document is left to find.
type Counter interface {
	// Count returns the number of items the store holds of documents whose
	// key starts with prefix, as Holdings reports them: each chunk, and
	// each present record of a document (Holding.Present). ok is false when
	// the store cannot count by that prefix.
	Count(ctx context.Context, prefix string) (n int64, ok bool, err error)
}

// items is the number of items a holding counts for Counter.Count.
func items(h Holding) int64 {
	n := int64(len(h.Chunks))
	if h.Present {
		n++
	}
	return n
}

// Source rebuilds writes from the relational copy.
type Source interface {
	// Reprojection returns the write that projects the current state of
	// keys (live documents with their chunks, withdrawn ones as
	// withdrawals), with the ids and vectors of the original projection.
	// Live documents whose chunk rows are incomplete are left out and
	// returned in incomplete with the ordinals they lack.
	Reprojection(ctx context.Context, keys []string) (w *project.Write, incomplete map[string][]int, err error)
}

// Log reads the document topic for what the relational copy cannot
// rebuild.
type Log interface {
	// Documents returns the live documents of keys as their events
	// projected them, read again at the log positions the decision store
	// records, with the same ids and, from a deterministic or cached
	// embedder, the same vectors. The keys it cannot give back (the topic
	// no longer keeps the event, or holds another there) are in lost, with
	// why.
	Documents(ctx context.Context, keys []string) (docs []project.Document, lost map[string]error, err error)
}

// RelationalWriter is the relational store's write, which takes ledger
// rows; a repair writes none.
type RelationalWriter interface {
	Apply(ctx context.Context, w *project.Write, ledger []project.LedgerEntry) error
}

// StoreWriter is the index's or the graph's write.
type StoreWriter interface {
	Apply(ctx context.Context, w *project.Write) error
}

// WriteOrder is the three stores a repair writes, in the fixed order of
// docs/write-order.md: index, then graph, then relational.
type WriteOrder struct {
	Index      StoreWriter
	Graph      StoreWriter
	Relational RelationalWriter
	// Embedder, when set, is the embedder of Generation, the index
	// generation Index is: a chunk row whose vector another generation's
	// embedder made (an earlier live one, before a switch) is embedded
	// again before the writes (project.Reembed), so that no store gets a
	// vector of another model.
	Embedder   project.Embedder
	Generation int
	// Faults, when set, is told the points between the writes,
	// repair-after-index and repair-after-graph (tests only).
	Faults Faults
}

// Apply writes w to each store in turn, each write under lease; a later
// store is not written when an earlier one failed or the lease no longer
// holds.
func (o WriteOrder) Apply(ctx context.Context, lease Lease, w *project.Write) error {
	if o.Embedder != nil {
		var err error
		if w, err = project.Reembed(ctx, o.Embedder, o.Generation, w); err != nil {
			return fmt.Errorf("embed for index generation %d: %w", o.Generation, err)
		}
	}
	if err := underLease(ctx, lease, func(ctx context.Context) error { return o.Index.Apply(ctx, w) }); err != nil {
		return err
	}
	o.fault(ctx, "repair-after-index")
	if err := underLease(ctx, lease, func(ctx context.Context) error { return o.Graph.Apply(ctx, w) }); err != nil {
		return err
	}
	o.fault(ctx, "repair-after-graph")
	return underLease(ctx, lease, func(ctx context.Context) error { return o.Relational.Apply(ctx, w, nil) })
}

func (o WriteOrder) fault(ctx context.Context, point string) {
	if o.Faults != nil {
		o.Faults.At(ctx, point)
	}
}

// Lease is the repair lease (docs/write-order.md, "The repair lease").
// While a repair holds it, run's relational writes wait, and run commits
// nothing before its fences have read every store back and re-projected
// what differs: whatever the repair wrote to a store before the lease ended
// is seen and corrected. A write that lands after the lease ended is not,
// so no write of a repair may.
type Lease interface {
	// WriteDeadline returns the time by which a write that starts now must
	// have ended, a margin before the lease could end, or an error when
	// the lease no longer holds, or may not.
	WriteDeadline() (time.Time, error)
}

// underLease runs write, a write to one store, only while the lease holds,
// and with a context that ends at the lease's write deadline.
func underLease(ctx context.Context, lease Lease, write func(context.Context) error) error {
	deadline, err := lease.WriteDeadline()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithDeadlineCause(ctx, deadline, errLeaseDeadline)
	defer cancel()
	err = write(wctx)
	if err != nil && errors.Is(context.Cause(wctx), errLeaseDeadline) {
		return fmt.Errorf("%w: %w", errLeaseDeadline, err)
	}
	return err
}

// errLeaseDeadline ends a repair's write that ran up to the margin before
// its lease could end.
var errLeaseDeadline = errors.New("the write did not end in time for the repair lease (a longer --repair-lease-ttl gives a write more time)")

// Withdrawals is the write that removes every chunk of keys from a store;
// adapters use it to delete the documents of unknown keys. Its version is
// the highest there is: a store's withdrawal removes only versions up to
// the withdrawn one, and these keys must go whatever version they hold.
func Withdrawals(keys []string) *project.Write {
	w := &project.Write{Withdrawn: make([]project.Withdrawal, len(keys))}
	for i, k := range keys {
		w.Withdrawn[i] = project.Withdrawal{Key: k, Version: math.MaxInt64}
	}
	return w
}
