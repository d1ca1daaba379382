package project

import (
	"context"
	"errors"
	"fmt"
)

// ErrorKind says what a store failure means for the batch, so the projector
// can decide without knowing the store.
type ErrorKind int

const (
	// Transient failures (timeouts, lost connections, a store restarting,
	// serialization failures) go away by themselves: retry the batch.
	Transient ErrorKind = iota
	// Rejected means the store refused this data and always will: find the
	// record that causes it and send it to the dead-letter topic.
	Rejected
	// Fatal failures (wrong credentials, missing permissions, a schema the
	// service cannot use) need an operator: keep retrying slowly, report not
	// ready, and commit nothing.
	Fatal
	// Limit means a limit of the store, not of any record, refused the
	// call: a collection's or server's configured limit (Qdrant's strict
	// mode), a request or transaction too large, a quota or rate limit.
	// Blaming a record would spread good records over dead letters, so it
	// is handled like Fatal (retried slowly, reported with the limit's
	// name on /readyz and in projector_store_limit_errors_total, nothing
	// committed) and never isolated.
	Limit
)

func (k ErrorKind) String() string {
	switch k {
	case Rejected:
		return "rejected"
	case Fatal:
		return "fatal"
	case Limit:
		return "limit"
	default:
		return "transient"
	}
}

// StoreError is a failure of one store, classified by its adapter.
type StoreError struct {
	Store string // index, graph or relational
	Kind  ErrorKind
	// LimitName names the limit of a Limit failure, in the store's own
	// terms where it has them (upsert_max_batchsize,
	// max_request_size), for logs, metrics and /readyz.
	LimitName string
	Err       error
}

func (e *StoreError) Error() string { return e.Store + ": " + e.Err.Error() }

// Unwrap returns the driver's error.
func (e *StoreError) Unwrap() error { return e.Err }

// KindOf classifies err. Errors that no adapter classified count as
// transient: retrying is always safe, because nothing is committed until the
// batch succeeds.
func KindOf(err error) ErrorKind {
	var se *StoreError
	if errors.As(err, &se) {
		return se.Kind
	}
	return Transient
}

// LimitOf names the limit of a Limit failure, or "" for other errors.
func LimitOf(err error) string {
	var se *StoreError
	if errors.As(err, &se) && se.Kind == Limit {
		return se.LimitName
	}
	return ""
}

// StoreOf names the store of err, or "" when it is not a store failure.
func StoreOf(err error) string {
	var se *StoreError
	if errors.As(err, &se) {
		return se.Store
	}
	return ""
}

// WithContextErr returns err with, once ctx has ended, ctx's error in its
// chain too. Drivers report a call cut short by its context in their own
// terms (a gRPC status, the Neo4j driver's retry limit); with this, the
// service tells a shutdown from a failing store by errors.Is(err,
// context.Canceled), and exits 0 on SIGTERM.
func WithContextErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return contextEnded{err, ctx.Err()}
}

// contextEnded is a driver's error from a call whose context ended.
type contextEnded struct {
	error
	ctxErr error
}

func (e contextEnded) Unwrap() []error { return []error{e.error, e.ctxErr} }

// ErrLockTimeout is in the chain of a store's error when the store gave up
// waiting for a lock that another session holds (PostgreSQL's
// lock_timeout): a writer that stopped inside its transaction, until the
// store ends its session. It is transient; the caller can say what it
// waited for.
var ErrLockTimeout = errors.New("timed out waiting for a lock another session holds")

// PermanentError is a failure of a dependency that no retry heals and that
// no record of the batch is to blame for, such as the dead-letter topic
// refusing a letter. Retrying stops for it at once.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *PermanentError) Unwrap() error { return e.Err }

// FencedError is a write a store refused because the partition has since
// been given to another writer: the store has seen a newer token than the
// write's. No retry can help, and the batch must not be committed.
type FencedError struct {
	Store string
	Fence Fence
	// Newest is the newest token the store has seen for the partition.
	Newest int64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%s: partition %s/%d has a newer writer (token %d) than this member (token %d): it was assigned to another member",
		e.Store, e.Fence.Topic, e.Fence.Partition, e.Newest, e.Fence.Token)
}

// WaitError is a store's answer that a write must wait, not a failure: the
// repair lease is held by a repair. The projector writes the batch again
// every WaitRetry until the store takes it, without reporting the store as
// failing or counting an error.
type WaitError struct {
	Store  string
	Reason string
}

func (e *WaitError) Error() string { return e.Store + ": waiting: " + e.Reason }

// GenerationsChangedError is the relational store's refusal of a write
// whose index step wrote another set of index generations than the
// registry now holds (Write.Epoch): a generation was started, retired or
// aborted since. The batch is written again, from the index step, to the
// generations of the new set, so that no relational commit after a
// generation's start leaves that generation without the write.
type GenerationsChangedError struct {
	// Wrote is the epoch the write's index step wrote, Now the registry's.
	Wrote, Now int64
}

func (e *GenerationsChangedError) Error() string {
	return fmt.Sprintf("relational: the index generations changed (epoch %d, the write's index step wrote epoch %d): writing the batch again to the new set", e.Now, e.Wrote)
}
