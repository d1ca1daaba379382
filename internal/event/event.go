// Package event decodes and validates document events, the projector's input.
//
// The format is the public contract's section 2. Everything that can be
// checked about a record without a store is checked here, so that a record
// either becomes an Event that the stores can always accept, or an *Error
// whose Reason sends it to the dead-letter topic. Decoding is a pure function
// of the record and the Decoder's settings.
package event

import (
	"github.com/projector/projector/internal/keys"
)

// MaxKeyBytes is the contract's limit on document_key.
const MaxKeyBytes = 512

// MaxCorrelationIDBytes bounds the correlation id, which is logged and stored.
const MaxCorrelationIDBytes = 256

// Event is one validated document event.
type Event struct {
	// Key is the document key; it equals the Kafka record key.
	Key string
	// Version is set by the source system. It is 0 for a tombstone, whose
	// version is the stored one: the projector resolves it against the
	// relational store.
	Version int64
	Op      keys.Op
	// Tombstone is set for a record with a key and a null value.
	Tombstone bool
	Title     string
	Source    string
	// Metadata holds JSON scalars only: string, bool, nil, int64 or float64.
	Metadata map[string]any
	// Chunks is the document already split, ordinal = index. For an event
	// that carried text it is the splitter's output. Empty for withdrawals.
	Chunks        []Chunk
	CorrelationID string
	// ContentHash identifies the event's content (title, source, metadata,
	// chunks or text) so that the same version with other content can be told
	// apart from a redelivery. It does not depend on the splitter or the
	// embedder settings: changing those and replaying is not a conflict.
	ContentHash string
}

// Chunk is one piece of a document.
type Chunk struct {
	Text string
	// Vector is the embedding carried in the event, or nil when the
	// projector's embedder computes it.
	Vector   []float32
	Metadata map[string]any
}
