package postgres

import (
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout returns a net.Dialer Control that sets TCP_USER_TIMEOUT:
// a connection whose sent bytes stay unacknowledged for d is dropped,
// rather than retransmitted for the kernel's default of about 15 minutes.
// A Unix socket (host=/var/run/postgresql) has no such option.
func setUserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}
