package testenv

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// clusterHint is printed when the cluster is missing.
const clusterHint = "start it with: KAFKA_CLUSTER=1 scripts/services.sh up && eval \"$(KAFKA_CLUSTER=1 scripts/services.sh env)\""

// ClusterRequested reports whether KAFKA_CLUSTER asks scripts/services.sh
// for the three-broker cluster.
func ClusterRequested() bool {
	switch os.Getenv("KAFKA_CLUSTER") {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// ClusterBrokers returns the bootstrap addresses of the three-broker Kafka
// cluster (PROJECTOR_TEST_CLUSTER_BROKERS, which scripts/services.sh env
// prints with KAFKA_CLUSTER=1). Unlike the other services the cluster is
// opt-in: a test without it is skipped, in CI too, unless KAFKA_CLUSTER
// asks for it; then CI fails the test.
func ClusterBrokers(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("PROJECTOR_TEST_CLUSTER_BROKERS")
	if v == "" {
		clusterMissing(t, "PROJECTOR_TEST_CLUSTER_BROKERS is not set")
		return nil
	}
	brokers := strings.Split(v, ",")
	for _, b := range brokers {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", b)
		cancel()
		if err != nil {
			clusterMissing(t, "cannot reach "+b+": "+err.Error())
			return nil
		}
		_ = conn.Close()
	}
	return brokers
}

func clusterMissing(t testing.TB, why string) {
	t.Helper()
	if InCI() && ClusterRequested() {
		t.Fatalf("the three-broker Kafka cluster is required in CI with KAFKA_CLUSTER=%s: %s (%s)", os.Getenv("KAFKA_CLUSTER"), why, clusterHint)
		return
	}
	t.Skipf("the three-broker Kafka cluster is not available: %s; %s", why, clusterHint)
}
