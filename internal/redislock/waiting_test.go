package redislock_test

import (
	"context"
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
