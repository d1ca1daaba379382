package project

import "errors"

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
)

func (k ErrorKind) String() string {
	switch k {
	case Rejected:
		return "rejected"
	case Fatal:
		return "fatal"
	default:
		return "transient"
	}
}

// StoreError is a failure of one store, classified by its adapter.
type StoreError struct {
	Store string // index, graph or relational
	Kind  ErrorKind
	Err   error
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

// StoreOf names the store of err, or "" when it is not a store failure.
func StoreOf(err error) string {
	var se *StoreError
	if errors.As(err, &se) {
		return se.Store
	}
	return ""
}
