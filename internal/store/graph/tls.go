package graph

import (
	"errors"
	"strings"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// certificateRejected reports whether err says that TLS to Neo4j cannot
// work as configured: the server's certificate did not verify (an unknown
// authority, another host name, an expired certificate), or the server does
// not speak TLS on that port. Retrying cannot fix either. The driver wraps
// the TLS error in a type of its own that it neither exports nor unwraps,
// and its retry loop keeps every attempt's error, so this looks inside both
// and reads crypto/tls's own messages.
func certificateRejected(err error) bool {
	var limit *neo4j.TransactionExecutionLimit
	if errors.As(err, &limit) {
		for _, attempt := range limit.Errors {
			if certificateRejected(attempt) {
				return true
			}
		}
	}
	var conn *neo4j.ConnectivityError
	if !errors.As(err, &conn) || conn.Inner == nil {
		return false
	}
	msg := conn.Inner.Error()
	return strings.Contains(msg, "tls: failed to verify certificate") ||
		strings.Contains(msg, "tls: first record does not look like a TLS handshake")
}
