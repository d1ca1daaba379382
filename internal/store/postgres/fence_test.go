package postgres

import (
	"context"
	"errors"
	"slices"
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
	old, _, err := s.AcquireFence(ctx, "documents", 3, "member-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	newer, _, err := s.AcquireFence(ctx, "documents", 3, "member-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.AcquireFence(ctx, "documents", 4, "member-a", time.Minute)
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
		f, _, err := s.AcquireFence(ctx, "documents", 0, "member-b", time.Minute)
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

// TestLateWindow: the owner after one that did not release the partition
// learns that an index write of it may land for the window given; after a
// release it inherits what is left of an earlier window, and once that is
// over, nothing. The release of a token that is no longer the newest
// changes nothing.
func TestLateWindow(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const window = 20 * time.Second
	acquire := func(writer string) (project.Fence, time.Duration) {
		t.Helper()
		f, late, err := s.AcquireFence(ctx, "documents", 7, writer, window)
		if err != nil {
			t.Fatal(err)
		}
		return f, late
	}
	first, late := acquire("first")
	if late != 0 {
		t.Errorf("the first owner ever waits %s for a late write, want 0", late)
	}
	_, late = acquire("second")
	if late < window-5*time.Second || late > window {
		t.Errorf("after an owner that did not release: late window %s, want about %s", late, window)
	}
	if err := s.ReleaseFence(ctx, first); err != nil {
		t.Fatal(err)
	}
	third, late := acquire("third")
	if late < window-5*time.Second || late > window {
		t.Errorf("after an older token's release: late window %s, want about %s (the second owner did not release)", late, window)
	}
	if err := s.ReleaseFence(ctx, third); err != nil {
		t.Fatal(err)
	}
	_, late = acquire("fourth")
	if late < window-5*time.Second || late > window {
		t.Errorf("after a release within an earlier window: late window %s, want what is left of it, about %s", late, window)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE partition_writers SET released = true, late_until = now() - interval '1 second' WHERE source_partition = 7`); err != nil {
		t.Fatal(err)
	}
	if _, late = acquire("fifth"); late != 0 {
		t.Errorf("after a release with the earlier window over: late window %s, want 0", late)
	}
}

// TestSettleRecords: a write made in the late window records its
// documents for the partition's settle, which lists them in pages under
// the newest token and forgets them; an older token is refused both.
func TestSettleRecords(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old, _, err := s.AcquireFence(ctx, "documents", 8, "old", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := s.AcquireFence(ctx, "documents", 8, "new", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w := &project.Write{Fence: f, Settle: true,
		Live:      []project.Document{storetest.Doc("s-b", 1, "x"), storetest.Doc("s-a", 1, "y")},
		Withdrawn: []project.Withdrawal{{Key: "s-c", Version: 1}}}
	if err := s.Apply(ctx, w, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, &project.Write{Fence: f, Live: []project.Document{storetest.Doc("s-d", 1, "z")}}, nil); err != nil {
		t.Fatal(err)
	}
	page, err := s.Unsettled(ctx, f, "", 2)
	if err != nil || !slices.Equal(page, []string{"s-a", "s-b"}) {
		t.Fatalf("first page = %v, %v; want [s-a s-b]", page, err)
	}
	if page, err = s.Unsettled(ctx, f, "s-b", 2); err != nil || !slices.Equal(page, []string{"s-c"}) {
		t.Fatalf("second page = %v, %v; want [s-c] (s-d was written outside the window)", page, err)
	}
	var fenced *project.FencedError
	if _, err := s.Unsettled(ctx, old, "", 10); !errors.As(err, &fenced) {
		t.Errorf("Unsettled under an older token = %v, want a FencedError", err)
	}
	if err := s.Settled(ctx, old, []string{"s-a"}); !errors.As(err, &fenced) {
		t.Errorf("Settled under an older token = %v, want a FencedError", err)
	}
	if err := s.Settled(ctx, f, []string{"s-a", "s-b"}); err != nil {
		t.Fatal(err)
	}
	if page, err = s.Unsettled(ctx, f, "", 10); err != nil || !slices.Equal(page, []string{"s-c"}) {
		t.Errorf("after forgetting s-a and s-b: %v, %v; want [s-c]", page, err)
	}
	if err := s.CheckFence(ctx, f); err != nil {
		t.Errorf("CheckFence of the newest token: %v", err)
	}
	if err := s.CheckFence(ctx, old); !errors.As(err, &fenced) {
		t.Errorf("CheckFence of an older token = %v, want a FencedError", err)
	}
}
