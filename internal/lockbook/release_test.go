package lockbook

import (
	"errors"
	"testing"
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestReleaseAfterALapse: a release that finds the claimant's lease run out tells "nobody was
// granted the lock since" (ErrLapsedUntaken: the claimant held it alone until now) from every other
// case (ErrNotHeld alone), for a lock and for a semaphore's slot. A lapse is what an operator away
// past the ttl finds: the lock key gone, the fence key, which never expires, kept.
func TestReleaseAfterALapse(t *testing.T) {
	book, lockClient, rdb := unitLocks(t)
	ctx := t.Context()
	grant := func(key, token string, opts ...redislock.AcquireOption) *redislock.Lock {
		t.Helper()
		l, err := lockClient.Acquire(ctx, key, time.Minute, append(opts, redislock.WithToken(token))...)
		if err != nil {
			t.Fatalf("acquire %s with %s: %v", key, token, err)
		}
		return l
	}
	lapse := func(l *redislock.Lock) {
		t.Helper()
		if err := rdb.Del(ctx, l.RedisKey()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	claimOf := func(l *redislock.Lock, token string) Claim {
		c := Claim{Key: l.Key(), Token: token, Fence: l.Fence()}
		if l.Semaphore() {
			slot := int32(l.Slot())
			c.Slot = &slot
		}
		return c
	}

	untaken := grant("untaken", "t1")
	lapse(untaken)

	takenAndGone := grant("taken-and-gone", "t1")
	lapse(takenAndGone)
	if err := grant("taken-and-gone", "t2").Release(ctx); err != nil {
		t.Fatal(err)
	}

	heldByAnother := grant("held", "t1")
	lapse(heldByAnother)
	grant("held", "t2")

	unfenced := grant("unfenced", "t1")
	lapse(unfenced)
	noFence := claimOf(unfenced, "t1")
	noFence.Fence = 0

	if err := lockClient.SetPermits(ctx, "semaphore", 2); err != nil { // as a Lock of 2 permits does
		t.Fatal(err)
	}
	grant("semaphore", "s0", redislock.WithPermits(2))
	slot1 := grant("semaphore", "s1", redislock.WithPermits(2))
	if slot1.Slot() != 1 {
		t.Fatalf("second holder of a semaphore of 2 got slot %d, want 1", slot1.Slot())
	}
	lapse(slot1)

	for _, c := range []struct {
		name   string
		claim  Claim
		lapsed bool
	}{
		{"lapsed, nobody since", claimOf(untaken, "t1"), true},
		{"lapsed, another held it and released", claimOf(takenAndGone, "t1"), false},
		{"lapsed, another holds it", claimOf(heldByAnother, "t1"), false},
		{"lapsed, no fence to compare", noFence, false},
		{"a semaphore's slot lapsed, nobody since", claimOf(slot1, "s1"), true},
	} {
		err := book.Release(ctx, c.claim)
		if !errors.Is(err, ErrNotHeld) {
			t.Errorf("%s: release = %v, want ErrNotHeld", c.name, err)
		}
		if got := errors.Is(err, ErrLapsedUntaken); got != c.lapsed {
			t.Errorf("%s: ErrLapsedUntaken %t, want %t (%v)", c.name, got, c.lapsed, err)
		}
	}
}
