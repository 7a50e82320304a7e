package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

func acquireQueued(c *Client, key, member string, score float64, liveness time.Duration) (*Lock, error) {
	return c.Acquire(context.Background(), key, time.Minute, WithQueue(member, score, liveness))
}

func position(t *testing.T, err error) int {
	t.Helper()
	var qe *QueuedError
	if !errors.As(err, &qe) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("got %v, want a QueuedError matching ErrNotAcquired", err)
	}
	return qe.Position
}

// TestQueueServesByScoreThenMember: a free lock goes to the head of the queue only.
func TestQueueServesByScoreThenMember(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute)

	// Join in an order that differs from the serving order.
	for _, w := range []struct {
		member string
		score  float64
	}{{"b", 10}, {"d", 5}, {"c", 5}} {
		_, err := acquireQueued(c, key, w.member, w.score, time.Minute)
		position(t, err)
	}
	for member, want := range map[string]int{"c": 1, "d": 2, "b": 3} {
		_, err := acquireQueued(c, key, member, map[string]float64{"b": 10, "c": 5, "d": 5}[member], time.Minute)
		if got := position(t, err); got != want {
			t.Fatalf("%s at position %d, want %d", member, got, want)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lock is free, but only the head may acquire it.
	if _, err := acquireQueued(c, key, "b", 10, time.Minute); position(t, err) != 3 {
		t.Fatal("b jumped the queue")
	}
	for _, m := range []struct {
		member string
		score  float64
	}{{"c", 5}, {"d", 5}, {"b", 10}} {
		l, err := acquireQueued(c, key, m.member, m.score, time.Minute)
		if err != nil {
			t.Fatalf("%s at the head: %v", m.member, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueueDropsVanishedWaiters: a waiter that stops asking cannot block the queue.
func TestQueueDropsVanishedWaiters(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	holder := mustAcquire(t, c, key, time.Minute)
	if _, err := acquireQueued(c, key, "ghost", 0, 100*time.Millisecond); position(t, err) != 1 {
		t.Fatal("ghost should be first")
	}
	if _, err := acquireQueued(c, key, "live", 10, time.Minute); position(t, err) != 2 {
		t.Fatal("live should be second")
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the ghost to drop out and live to get the lock", func() bool {
		_, err := acquireQueued(c, key, "live", 10, time.Minute)
		return err == nil
	})
}

func TestDequeueAndReleaseToken(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithToken("restart-safe-token"))
	_, _ = acquireQueued(c, key, "first", 0, time.Minute)
	_, _ = acquireQueued(c, key, "second", 1, time.Minute)
	if err := c.Dequeue(ctx, key, "first"); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseToken(ctx, key, "wrong-token", 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("ReleaseToken with a wrong token: %v, want ErrNotHeld", err)
	}
	if err := c.ReleaseToken(ctx, key, holder.Token(), 0); err != nil {
		t.Fatalf("ReleaseToken: %v", err)
	}
	if _, err := acquireQueued(c, key, "second", 1, time.Minute); err != nil {
		t.Fatalf("second should be at the head after first left: %v", err)
	}
}

// TestQueuedErrorNamesTheHolder: a waiter learns who blocks it from the acquisition's own answer.
func TestQueuedErrorNamesTheHolder(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	holder := mustAcquire(t, c, key, time.Minute, WithMetadata("ns/holder"))
	var qe *QueuedError
	if _, err := acquireQueued(c, key, "a", 0, time.Minute); !errors.As(err, &qe) || qe.Holder != "ns/holder" {
		t.Fatalf("got %v, want a QueuedError naming ns/holder", err)
	}
	if _, err := acquireQueued(c, key, "b", 1, time.Minute); !errors.As(err, &qe) || qe.Position != 2 {
		t.Fatalf("got %v, want position 2", err)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Free, but "a" is ahead: nobody holds it, so no holder is named.
	if _, err := acquireQueued(c, key, "b", 1, time.Minute); !errors.As(err, &qe) || qe.Holder != "" || qe.Position != 2 {
		t.Fatalf("got %v (holder %q), want position 2 and no holder", err, qe.Holder)
	}
}
