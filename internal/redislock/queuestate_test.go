package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// TestQueueStateCountsTheLiveWaiters: the view of a queue counts the waiters that are live and names
// the first live one as the head; a waiter nobody keeps drops out of both, without being pruned.
func TestQueueStateCountsTheLiveWaiters(t *testing.T) {
	c, _, rc := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	if st, err := c.QueueState(ctx, key); err != nil || st != (QueueState{}) {
		t.Fatalf("empty queue: %+v, %v", st, err)
	}
	mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	const short = 300 * time.Millisecond
	if _, err := acquireQueued(c, key, "fleeting", 1, short); position(t, err) != 1 {
		t.Fatal("fleeting should be first in line")
	}
	if _, err := acquireQueued(c, key, "steady", 2, time.Minute); position(t, err) != 2 {
		t.Fatal("steady should be second in line")
	}
	joined := serverNowMs(t, rc)
	st, err := c.QueueState(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st != (QueueState{Waiting: 2, Head: "fleeting"}) {
		t.Fatalf("two waiters: %+v", st)
	}

	eventually(t, 5*time.Second, "the short liveness to pass on the server", func() bool {
		return serverNowMs(t, rc) > joined+short.Milliseconds()
	})
	if st, err = c.QueueState(ctx, key); err != nil || st != (QueueState{Waiting: 1, Head: "steady"}) {
		t.Fatalf("after fleeting's liveness: %+v, %v", st, err)
	}
	// Read only: the dead waiter is still in the queue for the next acquisition to prune.
	if n := rc.ZCard(ctx, KeysFor(c, key, true)[3]).Val(); n != 2 {
		t.Fatalf("queue holds %d members after QueueState, want 2 (no pruning)", n)
	}
}

// TestQueueStateOnRedlockIsRefused: Redlock nodes keep separate queues, so there is no one state.
func TestQueueStateOnRedlockIsRefused(t *testing.T) {
	c, _ := redlock(t, 3)
	if _, err := c.QueueState(context.Background(), uniqueKey(t)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("QueueState on Redlock: %v, want ErrInvalidArgument", err)
	}
}
