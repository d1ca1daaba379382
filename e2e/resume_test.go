package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResumeHaltedPartition halts a partition (its dead letter is refused
// for good by a compacted dead-letter topic), fixes the cause while the
// service runs, and resumes the partition through the admin endpoint:
// its lag reaches zero and no partition of the member was revoked.
func TestResumeHaltedPartition(t *testing.T) {
	w := newWorld(t, 2)
	ctx := context.Background()
	if _, err := w.adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	w.produceTo(0, doc{Key: w.key("a1"), Version: 1, Chunks: []string{"a"}}.record(),
		&kgo.Record{Value: []byte(`{"document_key":"k-nokey","version":1,"chunks":[]}`)},
		doc{Key: w.key("a2"), Version: 1, Chunks: []string{"b"}}.record())
	w.produceTo(1, doc{Key: w.key("b1"), Version: 1, Chunks: []string{"c"}}.record())
	adminAddr := freeAddr(t)
	adminURL := "http://" + adminAddr
	p := w.start(nil, "--admin-addr", adminAddr)
	p.waitMetrics(time.Minute, "partition 0 halted", func(m map[string]float64) bool {
		return m[`projector_partition_halts_total{reason="dead_letter_refused"}`] == 1
	})

	stdout, stderr, code := w.cli("partitions", "--admin-url", adminURL)
	lines := scanLines(stdout)
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[1], " halted ") || !strings.Contains(lines[1], "dead_letter_refused") ||
		!strings.Contains(lines[2], " running ") {
		t.Fatalf("projector partitions: exit %d\n%s%s\nwant partition 0 halted for dead_letter_refused and partition 1 running", code, stdout, stderr)
	}
	if _, stderr, code := w.cli("resume", "--admin-url", adminURL, w.topic, "1"); code != 1 || !strings.Contains(stderr, "not halted") {
		t.Errorf("resume of a running partition: exit %d, %q; want 1 and that it is not halted", code, stderr)
	}

	// The cause is fixed: the dead-letter topic keeps keyless letters again.
	alter := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}}
	if _, err := w.adm.AlterTopicConfigs(ctx, alter, w.dlqTopic); err != nil {
		t.Fatal(err)
	}
	assigned := strings.Count(p.log.String(), `"msg":"partition assigned"`)
	if stdout, stderr, code := w.cli("resume", "--admin-url", adminURL, w.topic, "0"); code != 0 || !strings.Contains(stdout, "resumed "+w.topic+"/0") {
		t.Fatalf("projector resume: exit %d, %q %q", code, stdout, stderr)
	}
	w.produceTo(0, doc{Key: w.key("a3"), Version: 1, Chunks: []string{"d"}}.record())
	w.waitDrained(p, time.Minute)
	log := p.log.String()
	if n := strings.Count(log, `"msg":"partition assigned"`); n != assigned || strings.Contains(log, `"msg":"partition revoked"`) {
		t.Errorf("partitions assigned %d times after the resume (%d before), or revoked: want no rebalance", n, assigned)
	}
	if got := len(w.deadLetters()); got != 1 {
		t.Errorf("dead letters = %d, want the keyless record's", got)
	}
	for _, k := range []string{"a1", "a2", "a3", "b1"} {
		if !projected(t, w, w.key(k)) {
			t.Errorf("%s is not projected", k)
		}
	}
	if m := p.metrics(); m[`projector_partition_halted{partition="0",topic="`+w.topic+`"}`] != 0 || m["projector_ready"] != 1 {
		t.Errorf("after the resume: halted = %v, ready = %v; want 0 and 1",
			m[`projector_partition_halted{partition="0",topic="`+w.topic+`"}`], m["projector_ready"])
	}
	p.stop()
}
