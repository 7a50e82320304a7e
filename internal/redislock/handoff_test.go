package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

const releaseChannel = "lockedjob:released"

// subscribers counts the subscriptions to the release channel: a waiting Acquire has one while it
// waits (through the client's one reader of the release channel) and none after.
func subscribers(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	n, err := rc.PubSubNumSub(context.Background(), releaseChannel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[releaseChannel]
}

// releaseHandsTo releases holder's lock and checks that the release handed it to the waiter whose
// metadata is to, with a fence above holder's; it returns the lock as Redis then has it.
func releaseHandsTo(t *testing.T, c *Client, holder *Lock, to string) State {
	t.Helper()
	ctx := context.Background()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, holder.Key())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != to || st.Fence <= holder.Fence() {
		t.Fatalf("after the release: %+v, want it handed to %s with a fence above %d", st, to, holder.Fence())
	}
	return st
}

// TestReleaseHandsTheLockToTheHead: releasing a queued lock hands it off to the head of the queue, with
// the head's token, metadata and the next fencing token; nobody slips in before the head claims it.
func TestReleaseHandsTheLockToTheHead(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder, err := c.Acquire(ctx, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute), WithMetadata("ns/a")); position(t, err) != 1 {
		t.Fatal("a should be first in line")
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("b", 2, time.Minute)); position(t, err) != 2 {
		t.Fatal("b should be second in line")
	}
	st := releaseHandsTo(t, c, holder, "ns/a")
	if st.TTL < 50*time.Second {
		t.Fatalf("handed off for %v, want a's ttl of 1m", st.TTL)
	}
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("an outsider got the handed-off lock: %v", err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("b", 2, time.Minute)); position(t, err) != 1 {
		t.Fatal("b should be first in line once a holds the lock")
	}
	a, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute), WithMetadata("ns/a"))
	if err != nil {
		t.Fatalf("a claims the lock handed to it: %v", err)
	}
	if a.Fence() != st.Fence || !a.Readopted() {
		t.Fatalf("a's fence %d (re-adopted %v), want the handoff's %d, re-adopted", a.Fence(), a.Readopted(), st.Fence)
	}
}

// TestWaitingAcquireIsHandedTheLock: a queued Acquire that waits with retries returns as soon as a
// release hands it the lock. Its retry interval is an hour, so only the push can wake it.
func TestWaitingAcquireIsHandedTheLock(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications(releaseChannel))
	key := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, err := c.Acquire(ctx, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, key, time.Minute, WithQueue("waiter", 1, time.Minute), WithRetry(FixedBackoff(time.Hour)))
		got <- result{l, err}
	}()
	eventually(t, 5*time.Second, "the waiter to queue up and listen", func() bool {
		return subscribers(t, rc) == 1
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Acquire: %v", r.err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.l.Fence() <= holder.Fence() || r.l.Fence() != st.Fence || !r.l.Readopted() {
		t.Fatalf("fence %d (re-adopted %v), want the stored %d above %d, re-adopted", r.l.Fence(), r.l.Readopted(), st.Fence, holder.Fence())
	}
	if !r.l.Held() || time.Until(r.l.ValidUntil()) < 50*time.Second {
		t.Fatalf("handed-off lock valid until %v, want about a minute from now", r.l.ValidUntil())
	}
	// It is really ours: Renew works, and releasing it frees the lock.
	if err := r.l.Renew(ctx, 0); err != nil {
		t.Fatalf("renew the handed-off lock: %v", err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatalf("release the handed-off lock: %v", err)
	}
	eventually(t, 5*time.Second, "the subscription to end when nobody waits", func() bool {
		return subscribers(t, rc) == 0
	})
	if st, err := c.Inspect(ctx, key); err != nil || st.Held {
		t.Fatalf("after the last release: %+v, %v; want free", st, err)
	}
}

// TestStaleHandoffMessageIsIgnored: a handoff message that names the waiter but not its latest
// attempt cannot be dated, so the waiter must not take it for a lock.
func TestStaleHandoffMessageIsIgnored(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications(releaseChannel))
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute)

	got, cancel := startListeningWaiter(t, c, rc, key)
	defer cancel()
	before := evalCalls(t, rc)
	// Two messages, handled in order: a handoff naming the waiter but not its latest attempt, which
	// must be ignored, then a plain release, which sends the waiter (first in line) to ask again.
	stale := holder.RedisKey() + "\x00999\x0060000\x00not-the-latest-attempt\x00waiter"
	for _, msg := range []string{stale, holder.RedisKey()} {
		if n, err := rc.Publish(ctx, releaseChannel, msg).Result(); err != nil || n != 1 {
			t.Fatalf("publish: %d receivers, %v", n, err)
		}
	}
	eventually(t, 5*time.Second, "the waiter to ask again after the plain release", func() bool {
		return evalCalls(t, rc) > before
	})
	select {
	case err := <-got:
		t.Fatalf("Acquire returned on a stale handoff: %v", err)
	default:
	}
	expectCancelledWait(t, cancel, got)
}

// TestHandoffToAVanishedWaiterIsBounded: a waiter handed the lock right after it stopped asking
// holds it no longer than its liveness, and the next waiter gets it after that.
func TestHandoffToAVanishedWaiterIsBounded(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("ghost", 1, 300*time.Millisecond)); position(t, err) != 1 {
		t.Fatal("ghost should be first")
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("live", 2, time.Minute)); position(t, err) != 2 {
		t.Fatal("live should be second")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.TTL > 300*time.Millisecond {
		t.Fatalf("handed to the ghost: %+v, want held for at most its 300ms liveness", st)
	}
	eventually(t, 5*time.Second, "live to get the lock", func() bool {
		_, err := c.Acquire(ctx, key, time.Minute, WithQueue("live", 2, time.Minute))
		return err == nil
	})
}

// TestDequeueGivesBackAHandedOffLock: a waiter that gives up after a release handed it the lock
// hands it off to the next waiter instead of leaving it blocked for a lease.
func TestDequeueGivesBackAHandedOffLock(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	_, _ = c.Acquire(ctx, key, time.Minute, WithQueue("quitter", 1, time.Minute), WithMetadata("quitter"))
	_, _ = c.Acquire(ctx, key, time.Minute, WithQueue("next", 2, time.Minute), WithMetadata("next"))
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	handed, _ := c.Inspect(ctx, key)
	if handed.Metadata != "quitter" || handed.Fence <= holder.Fence() {
		t.Fatalf("handed off: %+v, want to quitter with a fence above %d", handed, holder.Fence())
	}
	if err := c.Dequeue(ctx, key, "quitter"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Metadata != "next" || st.Fence <= handed.Fence {
		t.Fatalf("after quitter left: %+v, want held by next with a fence above quitter's %d", st, handed.Fence)
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("next", 2, time.Minute), WithMetadata("next")); err != nil {
		t.Fatalf("next claims the lock: %v", err)
	}
}

// TestRedlockDoesNotHandOff: Redlock nodes keep separate queues, so a release frees the lock on
// every node and the head acquires it with its next attempt.
func TestRedlockDoesNotHandOff(t *testing.T) {
	c, _ := redlock(t, 3)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute)); position(t, err) != 1 {
		t.Fatal("a should be first")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Inspect(ctx, key); err != nil || st.Held {
		t.Fatalf("after the release: %+v, %v; want free", st, err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute)); err != nil {
		t.Fatalf("a acquires the free lock: %v", err)
	}
}

// startListeningWaiter starts a queued Acquire of key as member "waiter" that waits with an hour's
// backoff, so only a release message can make it act, and returns once it listens for releases.
func startListeningWaiter(t *testing.T, c *Client, rc *redis.Client, key string) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, key, time.Minute, WithQueue("waiter", 1, time.Minute), WithRetry(FixedBackoff(time.Hour)))
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter to queue up and listen", func() bool { return subscribers(t, rc) == 1 })
	return got, cancel
}

// expectCancelledWait cancels a waiter from startListeningWaiter and checks that it ends as a
// cancelled wait, not with a lock.
func expectCancelledWait(t *testing.T, cancel context.CancelFunc, got <-chan error) {
	t.Helper()
	cancel()
	if err := <-got; !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want ErrNotAcquired and context.Canceled", err)
	}
}

// TestDequeueHandsAFreeLockToTheNewHead: when the lease of a lock ran out and the head of its queue
// gives up, the next waiter is handed the lock at once, and told so: nobody announces an expiry,
// so it would otherwise wait for its next attempt.
func TestDequeueHandsAFreeLockToTheNewHead(t *testing.T) {
	c, _, _ := single(t, WithReleaseNotifications("lockedjob:released"))
	key := uniqueKey(t)
	ctx := t.Context()
	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, c, key, 50*time.Millisecond, WithQueue("holder", 0, time.Minute))
	_, _ = c.Acquire(ctx, key, time.Minute, WithQueue("quitter", 1, time.Minute), WithMetadata("quitter"))
	_, _ = c.Acquire(ctx, key, time.Minute, WithQueue("next", 2, time.Minute), WithMetadata("next"))
	eventually(t, 5*time.Second, "the holder's lease to run out", func() bool {
		st, err := c.Inspect(ctx, key)
		return err == nil && !st.Held
	})
	if err := c.Dequeue(ctx, key, "quitter"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != "next" || st.Fence <= holder.Fence() {
		t.Fatalf("after the head left a free lock: %+v, want held by next with a fence above %d", st, holder.Fence())
	}
	select {
	case got := <-releases:
		if got != (Released{Key: holder.RedisKey(), HandedTo: "next"}) {
			t.Fatalf("notified %+v, want the key handed to next", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nobody was told")
	}
	// Nobody waits any more: leaving changes nothing.
	l, err := c.Acquire(ctx, key, time.Minute, WithQueue("next", 2, time.Minute), WithMetadata("next"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Dequeue(ctx, key, "never-queued"); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Inspect(ctx, key); st.Held {
		t.Fatalf("a free lock with nobody waiting was acquired: %+v", st)
	}
}
