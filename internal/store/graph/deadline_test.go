package graph

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"

	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/storetest"
)

// TestDeadlineEndsTheTransactionOnTheServer: a transaction begun with
// txTimeout of a context with a deadline is ended by Neo4j once that
// deadline has passed (at its next check of the timeouts, every 2 s by
// default), even while its client waits on without one, here for a lock
// another transaction holds. Without it the server lets the transaction
// wait for the lock as long as the other holds it, and then write.
func TestDeadlineEndsTheTransactionOnTheServer(t *testing.T) {
	s, prefix := openTest(t)
	ctx := context.Background()
	key := prefix + "locked"
	if err := s.Apply(ctx, &project.Write{Live: []project.Document{storetest.Doc(key, 1, "x")}}); err != nil {
		t.Fatal(err)
	}
	lockNode := func(tx neo4j.ExplicitTransaction) error {
		res, err := tx.Run(ctx, `MATCH (d:Document {key: $key}) SET d.locked = true`, map[string]any{"key": key})
		if err != nil {
			return err
		}
		_, err = res.Consume(ctx)
		return err
	}
	holder := s.session(ctx, neo4j.AccessModeWrite)
	defer holder.Close(ctx)
	held, err := holder.BeginTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lockNode(held); err != nil {
		t.Fatal(err)
	}
	// The lock is released after 10 s, whatever happens, or on return.
	release := time.AfterFunc(10*time.Second, func() { _ = held.Rollback(ctx) })
	defer release.Stop()
	defer func() { _ = held.Rollback(ctx) }()

	deadline, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	waiter := s.session(ctx, neo4j.AccessModeWrite)
	defer waiter.Close(ctx)
	started := time.Now()
	tx, err := waiter.BeginTransaction(ctx, txTimeout(deadline)...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = lockNode(tx)
	took := time.Since(started)
	var n4j *neo4j.Neo4jError
	if !errors.As(err, &n4j) || took > 5*time.Second {
		t.Fatalf("a write past its 500 ms deadline ended after %s with %v, want the server to end it at the deadline", took, err)
	}
	t.Logf("the server ended the transaction after %s: %s", took, n4j.Code)
}

// TestNoDeadlineNoTimeout: without a deadline the server's own
// transaction timeout applies.
func TestNoDeadlineNoTimeout(t *testing.T) {
	if got := txTimeout(context.Background()); got != nil {
		t.Errorf("txTimeout of a context without a deadline = %d options, want none", len(got))
	}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	var c neo4j.TransactionConfig
	for _, o := range txTimeout(past) {
		o(&c)
	}
	if c.Timeout <= 0 {
		t.Errorf("txTimeout of a context past its deadline sets timeout %s, want a positive one (0 is none)", c.Timeout)
	}
}
