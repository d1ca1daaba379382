package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPublishCreatesTopicOnlyWhenAsked publishes to a topic that does not
// exist: without --create-topic it fails and makes no topic (a misspelt
// name must not become a topic nothing reads); with it, the topic is made.
func TestPublishCreatesTopicOnlyWhenAsked(t *testing.T) {
	w := newWorld(t, 1)
	missing := w.topic + ".missing"
	t.Cleanup(func() { _, _ = w.adm.DeleteTopics(context.Background(), missing) })
	path := filepath.Join(t.TempDir(), "docs.jsonl")
	if err := os.WriteFile(path, []byte(`{"document_key":"`+w.key("a")+`","version":1,"text":"a"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	publish := func(extra ...string) (string, error) {
		args := append([]string{"publish", "--brokers", w.brokers, "--topic", missing, "--file", path}, extra...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	exists := func() bool {
		details, err := w.adm.ListTopics(context.Background(), missing)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := details[missing]
		return ok && d.Err == nil
	}

	out, err := publish()
	if err == nil || !strings.Contains(out, "topic "+missing+" does not exist") || !strings.Contains(out, "--create-topic") {
		t.Errorf("publish to a missing topic: %v, %q; want a failure that names the topic and --create-topic", err, out)
	}
	if exists() {
		t.Fatalf("publish without --create-topic created %s", missing)
	}
	if out, err := publish("--create-topic", "--topic-partitions", "2"); err != nil {
		t.Fatalf("publish --create-topic: %v\n%s", err, out)
	}
	// The broker's metadata of a new topic may lag its creation.
	waitFor(t, 10*time.Second, "the created topic to have 2 partitions", func() bool {
		details, err := w.adm.ListTopics(context.Background(), missing)
		if err != nil {
			t.Fatal(err)
		}
		return len(details[missing].Partitions) == 2
	})
}
