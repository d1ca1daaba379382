package index

import (
	"errors"
	"strings"

	"google.golang.org/grpc/status"
)

// certificateRejected reports whether err says that TLS to Qdrant cannot
// work as configured: the server's certificate did not verify (an unknown
// authority, another host name, an expired certificate), or the server does
// not speak TLS at all. Retrying cannot fix either. gRPC turns the TLS error
// into the text of an Unavailable status, so the text is all there is to
// look at; these are crypto/tls's own messages.
func certificateRejected(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok {
			msg := st.Message()
			return strings.Contains(msg, "tls: failed to verify certificate") ||
				strings.Contains(msg, "tls: first record does not look like a TLS handshake")
		}
	}
	return false
}
