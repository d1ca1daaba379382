package testenv_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/projector/projector/internal/testenv"
)

// verdict records what a test helper decided instead of ending the test.
type verdict struct {
	testing.TB
	skipped, failed string
}

func (v *verdict) Helper()                          {}
func (v *verdict) Skipf(format string, args ...any) { v.skipped = fmt.Sprintf(format, args...) }
func (v *verdict) Fatalf(format string, args ...any) {
	v.failed = fmt.Sprintf(format, args...)
}

// TestClusterBrokers: without the cluster, a test is skipped, in CI too,
// unless KAFKA_CLUSTER asked for it; then CI fails it, so a broken set-up
// of the cluster never passes as a skip.
func TestClusterBrokers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	up := ln.Addr().String()
	tests := []struct {
		ci, cluster, brokers string
		want                 string // skip, fail or the brokers
	}{
		{"", "", "", "skip"},
		{"true", "", "", "skip"},
		{"true", "0", "", "skip"},
		{"", "1", "", "skip"},
		{"true", "1", "", "fail"},
		{"true", "1", "127.0.0.1:1", "fail"},
		{"", "1", "127.0.0.1:1", "skip"},
		{"true", "1", up + "," + up, up + "," + up},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("CI=%s KAFKA_CLUSTER=%s brokers=%s", tt.ci, tt.cluster, tt.brokers), func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			t.Setenv("KAFKA_CLUSTER", tt.cluster)
			t.Setenv("PROJECTOR_TEST_CLUSTER_BROKERS", tt.brokers)
			v := &verdict{TB: t}
			brokers := testenv.ClusterBrokers(v)
			got := strings.Join(brokers, ",")
			switch {
			case v.failed != "":
				got = "fail"
			case v.skipped != "":
				got = "skip"
				if !strings.Contains(v.skipped, "KAFKA_CLUSTER=1 scripts/services.sh up") {
					t.Errorf("skip message %q does not say how to start the cluster", v.skipped)
				}
			}
			if got != tt.want {
				t.Errorf("ClusterBrokers: %s (%s%s), want %s", got, v.failed, v.skipped, tt.want)
			}
		})
	}
}
