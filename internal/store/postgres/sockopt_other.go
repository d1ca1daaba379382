//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// setUserTimeout returns nil: TCP_USER_TIMEOUT is Linux's; elsewhere the
// keepalives alone notice a peer that is gone.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
