package qdrantdouble

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The err* constructors named after a Qdrant error reproduce its code and
// message verbatim: Qdrant renders a StorageError with a prefix per kind
// ("Wrong input: ", "Not found: ") and maps the kind to a code (BadInput to
// InvalidArgument, NotFound to NotFound, AlreadyExists to AlreadyExists).
// Callers branch on the code and people read the message, so both stay
// Qdrant's. Malformed requests get Qdrant's code (InvalidArgument) and, where
// Qdrant's wording is known, its wording.

// errCollectionNotFound is Qdrant's answer to any call naming a missing collection.
func errCollectionNotFound(name string) error {
	return status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
}

// errCollectionExists is Qdrant's answer to creating a collection twice.
func errCollectionExists(name string) error {
	return status.Errorf(codes.AlreadyExists, "Wrong input: Collection `%s` already exists!", name)
}

// errVectorDimension is Qdrant's answer to a vector whose length differs from
// the collection's size.
func errVectorDimension(expected, got int) error {
	return status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", expected, got)
}

// errNoFacetIndex is Qdrant's answer to faceting on a key without a keyword or
// integer (lookup) index.
func errNoFacetIndex(key string) error {
	return status.Errorf(codes.InvalidArgument, "Wrong input: No appropriate index for faceting: `%s`. Please create one to facet on this field. Check https://qdrant.tech/documentation/concepts/indexing/#payload-index to see which payload schemas support Match conditions", key)
}

// errInvalid is a malformed request, which Qdrant refuses with InvalidArgument.
func errInvalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// errUnsupported refuses something real Qdrant accepts but the double does not
// model. Answering it instead of ignoring it keeps a test from passing against
// the double with a request that means something else to Qdrant.
func errUnsupported(format string, args ...any) error {
	return status.Error(codes.Unimplemented, "qdrant test double does not support "+fmt.Sprintf(format, args...))
}
