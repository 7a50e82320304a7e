package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// serverNowMs is the Redis server's clock, which queue deadlines are written in.
func serverNowMs(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// TestKeepQueuedOutlivesTheWaitersOwnLiveness: a waiter that joined with a short liveness and never
// asks again is still handed the lock when its process kept it queued; one nobody kept drops out.
func TestKeepQueuedOutlivesTheWaitersOwnLiveness(t *testing.T) {
	c, _, rc := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	const short = 300 * time.Millisecond
	// "dropped" stands ahead of "kept", so only its dropping out lets "kept" be handed the lock.
	if _, err := acquireQueued(c, key, "dropped", 1, short); position(t, err) != 1 {
		t.Fatal("dropped should be first in line")
	}
	if _, err := acquireQueued(c, key, "kept", 2, short); position(t, err) != 2 {
		t.Fatal("kept should be second in line")
	}
	joined := serverNowMs(t, rc)

	gone, err := c.KeepQueued(ctx, key, time.Minute, "kept", "never-queued")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{"never-queued"}) {
		t.Fatalf("gone = %v, want [never-queued]", gone)
	}
	eventually(t, 5*time.Second, "the short liveness to pass on the server", func() bool {
		return serverNowMs(t, rc) > joined+short.Milliseconds()
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held {
		t.Fatal("the release handed the lock to nobody")
	}
	l, err := acquireQueued(c, key, "kept", 2, short)
	if err != nil || !l.Readopted() {
		t.Fatalf("kept claims the handed lock: %v", err)
	}
	// Handed the lock, "kept" left the queue: keeping it queued now tells it so.
	if gone, err := c.KeepQueued(ctx, key, time.Minute, "kept", "dropped"); err != nil || !slices.Equal(gone, []string{"kept", "dropped"}) {
		t.Fatalf("after the handoff: gone = %v (%v), want [kept dropped]", gone, err)
	}
}

// TestLineupNamesThePlacesAsked: one call tells who stands at each asked place, up to the queue's
// end, in the order Acquire reports positions.
func TestLineupNamesThePlacesAsked(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	var want []string
	for i := range 25 {
		m := fmt.Sprintf("w%02d", i)
		if _, err := acquireQueued(c, key, m, float64(100-i), time.Minute); position(t, err) < 1 {
			t.Fatal("not queued")
		}
		want = append([]string{m}, want...) // a lower score stands ahead
	}
	got, err := c.Lineup(ctx, key, 1, 2, 10, 20, 50)
	if err != nil {
		t.Fatal(err)
	}
	if exp := []string{want[0], want[1], want[9], want[19]}; !slices.Equal(got, exp) {
		t.Fatalf("Lineup = %v, want %v", got, exp)
	}
	_, err = acquireQueued(c, key, want[9], float64(100-15), time.Minute)
	if position(t, err) != 10 {
		t.Fatalf("Acquire and Lineup disagree on position 10")
	}
	if _, err := c.Lineup(ctx, key, 2, 1); err == nil {
		t.Fatal("positions out of order were accepted")
	}
	if got, err := c.Lineup(ctx, uniqueKey(t), 1); err != nil || len(got) != 0 {
		t.Fatalf("Lineup of an empty queue = %v, %v", got, err)
	}
}

func TestLineupRefusedOnRedlock(t *testing.T) {
	c, _ := redlock(t, 3)
	if _, err := c.Lineup(context.Background(), uniqueKey(t), 1); err == nil {
		t.Fatal("Redlock answered a lineup it cannot know")
	}
	if c.HandsOff() {
		t.Fatal("Redlock claims to hand locks off")
	}
}

func TestKeepQueuedOnRedlock(t *testing.T) {
	c, _ := redlock(t, 3)
	key := uniqueKey(t)
	mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if _, err := acquireQueued(c, key, "a", 1, time.Minute); position(t, err) != 1 {
		t.Fatal("a should be first in line")
	}
	gone, err := c.KeepQueued(context.Background(), key, time.Minute, "a", "b")
	if err != nil || !slices.Equal(gone, []string{"b"}) {
		t.Fatalf("gone = %v (%v), want [b]", gone, err)
	}
}

// joined is Join's answer, which must be a *QueuedError.
func joined(t *testing.T, c *Client, key, member string, score float64, opts ...AcquireOption) *QueuedError {
	t.Helper()
	err := c.Join(context.Background(), key, time.Minute, append(opts, WithQueue(member, score, time.Minute))...)
	qe, ok := errors.AsType[*QueuedError](err)
	if !ok || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Join(%s) = %v, want a QueuedError", member, err)
	}
	return qe
}

// TestJoinStandsInLineAndTakesNothing: a waiter that joins behind a holder is handed the lock by
// its release, with its own token, metadata and the next fence, though it never asked for the lock;
// one that joins a free lock is told so and the lock stays free until it asks; one that joins
// behind another waiter of a free lock is not.
func TestJoinStandsInLineAndTakesNothing(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()

	key := uniqueKey(t)
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute), WithMetadata("ns/holder"))
	if qe := joined(t, c, key, "a", 1, WithMetadata("ns/a")); qe.Position != 1 || qe.Free || qe.Holder != "ns/holder" {
		t.Fatalf("a joined behind the holder: %+v, want position 1, not free, held by ns/holder", qe)
	}
	st := releaseHandsTo(t, c, holder, "ns/a")
	// Joining again finds the lock handed over and leaves it as it is, for the next Acquire.
	if qe := joined(t, c, key, "a", 1, WithMetadata("ns/a")); !qe.Free {
		t.Fatalf("a joined a lock handed to it: %+v, want free for it", qe)
	}
	a, err := acquireQueued(c, key, "a", 1, time.Minute)
	if err != nil || !a.Readopted() || a.Fence() != st.Fence {
		t.Fatalf("a claims the handed lock: %v (%v), want re-adopted with fence %d", a, err, st.Fence)
	}

	free := uniqueKey(t)
	if qe := joined(t, c, free, "b", 5); qe.Position != 1 || !qe.Free {
		t.Fatalf("b joined a free lock: %+v, want position 1, free", qe)
	}
	if st, err := c.Inspect(ctx, free); err != nil || st.Held {
		t.Fatalf("the free lock after a join: %+v, %v; want it still free", st, err)
	}
	if qe := joined(t, c, free, "c", 9); qe.Position != 2 || qe.Free {
		t.Fatalf("c joined behind b: %+v, want position 2, not free", qe)
	}
	if _, err := acquireQueued(c, free, "c", 9, time.Minute); position(t, err) != 2 {
		t.Fatal("c took the lock b stands first for")
	}
	b, err := acquireQueued(c, free, "b", 5, time.Minute)
	if err != nil || b.Readopted() {
		t.Fatalf("b takes the free lock it joined: %v, %v", b, err)
	}
}

// TestJoinASemaphore: a join stands in a semaphore's line as in a plain lock's, told of a free slot,
// handed a slot when a holder releases one; and a plain lock that turned out to be a semaphore
// is joined as one.
func TestJoinASemaphore(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 2)
	first := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("s1", 0, time.Minute))
	if qe := joined(t, c, key, "a", 1, WithPermits(2)); qe.Position != 1 || !qe.Free {
		t.Fatalf("a joined with a slot free: %+v, want position 1, free", qe)
	}
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("a", 1, time.Minute))
	if qe := joined(t, c, key, "b", 2); qe.Position != 1 || qe.Free {
		t.Fatalf("b joined (without WithPermits) with both slots held: %+v, want position 1, not free", qe)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, key, time.Minute, WithQueue("b", 2, time.Minute))
	if err != nil || !b.Readopted() || b.Slot() != first.Slot() {
		t.Fatalf("b claims the slot handed to it: %v, %v; want slot %d re-adopted", b, err, first.Slot())
	}
}

func TestJoinRefused(t *testing.T) {
	c, _, _ := single(t)
	if err := c.Join(context.Background(), uniqueKey(t), time.Minute); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Join without a queue member = %v, want ErrInvalidArgument", err)
	}
	r, _ := redlock(t, 3)
	if err := r.Join(context.Background(), uniqueKey(t), time.Minute, WithQueue("a", 0, time.Minute)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Join on Redlock = %v, want ErrInvalidArgument", err)
	}
}
