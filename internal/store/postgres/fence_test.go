package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// TestFenceRefusesAnOlderWriter: once a partition has a newer writer, the
// states read and the write of an older one are refused with a
// FencedError and leave nothing; the newer writer and other partitions
// are unaffected.
func TestFenceRefusesAnOlderWriter(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old, err := s.AcquireFence(ctx, "documents", 3, "member-a")
	if err != nil {
		t.Fatal(err)
	}
	newer, err := s.AcquireFence(ctx, "documents", 3, "member-b")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.AcquireFence(ctx, "documents", 4, "member-a")
	if err != nil {
		t.Fatal(err)
	}
	if old.Token != 1 || newer.Token != 2 || other.Token != 1 {
		t.Fatalf("tokens = %d, %d and %d on another partition; want 1, 2 and 1", old.Token, newer.Token, other.Token)
	}
	late := &project.Write{Live: []project.Document{storetest.Doc("late", 1, "a")}, Fence: old}
	var fenced *project.FencedError
	if err := s.Apply(ctx, late, nil); !errors.As(err, &fenced) || fenced.Newest != 2 {
		t.Fatalf("Apply under token 1 after token 2 = %v, want a FencedError naming token 2", err)
	}
	if _, err := s.States(ctx, old, []string{"late"}); !errors.As(err, &fenced) {
		t.Fatalf("States under token 1 after token 2 = %v, want a FencedError", err)
	}
	states, err := s.States(ctx, project.Fence{}, []string{"late"})
	if err != nil || len(states) != 0 {
		t.Fatalf("States after the refused write = %v, %v; want nothing stored", states, err)
	}
	for _, w := range []*project.Write{
		{Live: []project.Document{storetest.Doc("late", 1, "a")}, Fence: newer},
		{Live: []project.Document{storetest.Doc("elsewhere", 1, "a")}, Fence: other},
	} {
		if err := s.Apply(ctx, w, nil); err != nil {
			t.Fatalf("Apply under the newest token of partition %d: %v", w.Fence.Partition, err)
		}
	}
}

// TestAssignmentWaitsForTheWritesInFlight forces the interleaving that
// fencing must order: an older writer's transaction has passed its fence
// check when the partition is assigned again. The new token is given only
// once that transaction has ended, so the old write is in before it, or
// refused after it; never in after the new owner has its token.
func TestAssignmentWaitsForTheWritesInFlight(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old, tx := writeInFlight(t, s, 0)
	acquired := make(chan project.Fence, 1)
	go func() {
		f, err := s.AcquireFence(ctx, "documents", 0, "member-b")
		if err != nil {
			t.Errorf("AcquireFence: %v", err)
		}
		acquired <- f
	}()
	waitForStatementWait(t, s, "INSERT INTO partition_writers")
	select {
	case f := <-acquired:
		t.Fatalf("the partition was assigned again (token %d) while a write of token %d was in flight", f.Token, old.Token)
	default:
	}
	if _, err := tx.Exec(ctx, `INSERT INTO documents (document_key, version, status, content_hash, title, source, chunk_count, correlation_id)
VALUES ('in-flight', 1, 'live', 'h', '', '', 0, '')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the old writer's commit: %v", err)
	}
	if f := <-acquired; f.Token != 2 {
		t.Errorf("token after the write in flight = %d, want 2", f.Token)
	}
	var fenced *project.FencedError
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc("after", 1, "a")}, Fence: old}, nil); !errors.As(err, &fenced) {
		t.Errorf("a write of token 1 after the assignment = %v, want a FencedError", err)
	}
}

// waitForStatementWait waits until a session of s running a statement
// that contains text waits on a lock: blocked behind the transaction the
// test holds open.
func waitForStatementWait(t *testing.T, s *Store, text string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, text).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw a statement with %q wait on a lock", text)
		}
	}
}
