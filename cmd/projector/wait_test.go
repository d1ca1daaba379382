package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaUnreachable checks which Kafka failures at start make the
// service wait (the broker is down or starting) and which stop it (waiting
// cannot fix a setting).
func TestKafkaUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("unable to dial: %w", refused), true},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"connection closed", fmt.Errorf("read: %w", io.EOF), true},
		{"coordinator still loading", kerr.CoordinatorLoadInProgress, true},
		{"wrong SASL password", fmt.Errorf("sasl: %w", kerr.SaslAuthenticationFailed), false},
		{"not authorized", kerr.TopicAuthorizationFailed, false},
		{"broker hung up at once", &kgo.ErrFirstReadEOF{}, false},
		{"client certificate rejected", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, false},
		{"server certificate not trusted", x509.UnknownAuthorityError{}, false},
	}
	for _, c := range cases {
		if got := kafkaUnreachable(c.err); got != c.want {
			t.Errorf("%s: kafkaUnreachable = %v, want %v", c.name, got, c.want)
		}
	}
}
