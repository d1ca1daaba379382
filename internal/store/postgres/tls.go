package postgres

import (
	"crypto/tls"
	"errors"
)

// certificateRejected reports whether err says that the server's TLS
// certificate did not verify under sslmode=verify-ca or verify-full (an
// unknown authority, another host name, an expired certificate): a
// configuration problem that retrying cannot fix.
func certificateRejected(err error) bool {
	var verify *tls.CertificateVerificationError
	return errors.As(err, &verify)
}
