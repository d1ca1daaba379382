package event

import "fmt"

// Reason is the stable, machine-readable word that says why a record is bad
// input. It is written to the dead-letter header projector-error-reason and is
// a label of projector_dlq_total, so values are part of the public contract:
// add new ones, never rename.
type Reason string

// The kinds of bad input.
const (
	ReasonInvalidUTF8     Reason = "invalid_utf8"      // key or value is not valid UTF-8
	ReasonNotJSON         Reason = "not_json"          // value does not parse as JSON
	ReasonNotObject       Reason = "not_object"        // value is JSON but not an object
	ReasonMissingKey      Reason = "missing_key"       // the Kafka record has no key
	ReasonMissingField    Reason = "missing_field"     // a required field is absent or null
	ReasonWrongType       Reason = "wrong_type"        // a field has the wrong JSON type
	ReasonInvalidKey      Reason = "invalid_key"       // document_key is empty or over 512 bytes
	ReasonKeyMismatch     Reason = "key_mismatch"      // document_key differs from the record key
	ReasonInvalidVersion  Reason = "invalid_version"   // version is not an integer >= 1
	ReasonInvalidOp       Reason = "invalid_op"        // op is neither upsert nor withdraw
	ReasonAmbiguousBody   Reason = "ambiguous_content" // both chunks and text are present
	ReasonInvalidMetadata Reason = "invalid_metadata"  // metadata is not an object of scalars
	ReasonNULCharacter    Reason = "nul_character"     // a string holds U+0000, which PostgreSQL text cannot store
	ReasonTooLarge        Reason = "too_large"         // the record is over the size limit
	ReasonTooManyChunks   Reason = "too_many_chunks"   // more chunks than the limit
	ReasonVectorDimension Reason = "vector_dimension"  // a chunk vector has the wrong dimension
	ReasonInvalidVector   Reason = "invalid_vector"    // a vector value is not a finite float32
)

// Reasons lists every reason the decoder gives, so metrics can show each
// at zero before it first happens.
func Reasons() []Reason {
	return []Reason{
		ReasonInvalidUTF8, ReasonNotJSON, ReasonNotObject, ReasonMissingKey, ReasonMissingField,
		ReasonWrongType, ReasonInvalidKey, ReasonKeyMismatch, ReasonInvalidVersion, ReasonInvalidOp,
		ReasonAmbiguousBody, ReasonInvalidMetadata, ReasonNULCharacter, ReasonTooLarge,
		ReasonTooManyChunks, ReasonVectorDimension, ReasonInvalidVector,
	}
}

// Error is bad input: the record can never be projected, however often it is
// retried, so it goes to the dead-letter topic. Callers tell it apart from
// store failures with errors.As.
type Error struct {
	Reason Reason
	// Detail says what was wrong in words a person can act on. It names
	// fields and limits but never repeats the document's content.
	Detail string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Detail }

func errorf(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
