// Package keys derives the identities the projector writes under.
//
// Every id is a pure function of the document's business identity: no clock,
// counter, random value or database round trip. That is what makes a
// redelivery, a crash-and-retry or a full replay write the same rows again
// instead of new ones.
package keys

import (
	"crypto/sha1"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Namespace is the UUIDv5 namespace of chunk ids, fixed by the public contract.
// Changing it changes every id in every store.
var Namespace = uuid.MustParse("6f9619ff-8b86-d011-b42d-00c04fc964ff")

// ChunkID returns the id of the chunk at ordinal (from 0) of a document version:
// UUIDv5 of "<documentKey>:<version>:<ordinal>" in Namespace (RFC 9562).
//
// Keys may contain ':'; the name stays unambiguous because version and ordinal
// are the last two fields and are decimal integers. It is computed without
// heap allocation for keys up to the contract's 512 bytes, as it runs once per
// chunk.
func ChunkID(documentKey string, version int64, ordinal int) uuid.UUID {
	var buf [16 + 512 + 48]byte
	name := append(buf[:0], Namespace[:]...)
	name = append(name, documentKey...)
	name = append(name, ':')
	name = strconv.AppendInt(name, version, 10)
	name = append(name, ':')
	name = strconv.AppendInt(name, int64(ordinal), 10)
	sum := sha1.Sum(name)
	var id uuid.UUID
	copy(id[:], sum[:16])
	id[6] = (id[6] & 0x0f) | 0x50 // version 5
	id[8] = (id[8] & 0x3f) | 0x80 // RFC 9562 variant
	return id
}

// ChunkIDs returns the ids of ordinals 0..count-1 of a document version.
func ChunkIDs(documentKey string, version int64, count int) []uuid.UUID {
	ids := make([]uuid.UUID, count)
	for i := range ids {
		ids[i] = ChunkID(documentKey, version, i)
	}
	return ids
}

// Op is what an event does to a document.
type Op string

// The two operations of the contract.
const (
	OpUpsert   Op = "upsert"
	OpWithdraw Op = "withdraw"
)

// IdempotencyKey returns the business key of an event,
// "document:<documentKey>:v<version>:<op>". It never depends on the Kafka
// offset, so a redelivered or republished event has the same key.
func IdempotencyKey(documentKey string, version int64, op Op) string {
	var b strings.Builder
	b.Grow(len("document:") + len(documentKey) + 2 + 20 + 1 + len(op))
	b.WriteString("document:")
	b.WriteString(documentKey)
	b.WriteString(":v")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], version, 10))
	b.WriteByte(':')
	b.WriteString(string(op))
	return b.String()
}
