package redislock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// plainQueue asks for key as a plain queued waiter (no WithPermits) and expects to stand at
// position.
func plainQueue(t *testing.T, c *Client, key, member string, score float64, position int) {
	t.Helper()
	_, err := c.Acquire(context.Background(), key, time.Minute, WithQueue(member, score, time.Minute), WithMetadata(member))
	qe, ok := errors.AsType[*QueuedError](err)
	if !ok || qe.Position != position {
		t.Fatalf("%s: plain queued Acquire = %v, want queued at position %d", member, err, position)
	}
}

// wantSlotLock fails unless l is a semaphore's lock of slot, on the slot's own key.
func wantSlotLock(t *testing.T, c *Client, l *Lock, key string, slot int) {
	t.Helper()
	wantKey := c.RedisKey(key)
	if slot > 0 {
		wantKey += ":s" + strconv.Itoa(slot)
	}
	if !l.Semaphore() || l.Slot() != slot || l.RedisKey() != wantKey {
		t.Fatalf("lock: semaphore %v slot %d key %q; want a semaphore's slot %d on %q", l.Semaphore(), l.Slot(), l.RedisKey(), slot, wantKey)
	}
}

func mustRelease(t *testing.T, l *Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release of slot %d: %v", l.Slot(), err)
	}
}

// TestPlainAcquireOnASemaphoreIsDiverted: an Acquire without WithPermits, queued or not, on a lock
// whose stored N is 3 gets a slot under the stored N, as a semaphore's lock, and is refused while 3
// are held; after N was lowered to 1 it is refused while any slot is held; no acquisition writes
// N, a plain one nor one WithPermits(1), which only lowers N for itself.
func TestPlainAcquireOnASemaphoreIsDiverted(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 3)
	a := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("a"))
	b := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("b"))

	plain := mustAcquire(t, c, key, time.Minute, WithMetadata("plain"))
	wantSlotLock(t, c, plain, key, 2)
	wantHolders(t, c, key, "a", "b", "plain")
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("plain Acquire with 3 of 3 held: %v", err)
	}
	plainQueue(t, c, key, "w", 1, 1)
	if got, err := rc.Get(ctx, c.RedisKey(key)+":permits").Result(); err != nil || got != "3" {
		t.Fatalf("stored permits after plain calls: %q, %v; want 3 untouched", got, err)
	}

	mustRelease(t, plain)
	wantHolders(t, c, key, "a", "b", "")
	w := mustAcquire(t, c, key, time.Minute, WithQueue("w", 1, time.Minute), WithMetadata("w"))
	wantSlotLock(t, c, w, key, 2)

	if err := c.SetPermits(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, a)
	wantHolders(t, c, key, "", "b", "w")
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("plain Acquire with N lowered to 1 under 2 holders: %v", err)
	}
	plainQueue(t, c, key, "v", 1, 1)
	mustRelease(t, b)
	mustRelease(t, w)
	v := mustAcquire(t, c, key, time.Minute, WithQueue("v", 1, time.Minute), WithMetadata("v"))
	wantSlotLock(t, c, v, key, 0)

	t.Run("an acquisition WithPermits(1) lowers N for itself only", func(t *testing.T) {
		key := uniqueKey(t)
		declare(t, c, key, 3)
		mustAcquire(t, c, key, time.Minute, WithPermits(3))
		mustAcquire(t, c, key, time.Minute, WithPermits(3))
		if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(1)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("Acquire WithPermits(1) under 2 holders: %v", err)
		}
		if got, err := rc.Get(ctx, c.RedisKey(key)+":permits").Result(); err != nil || got != "3" {
			t.Fatalf("stored permits after an acquisition WithPermits(1): %q, %v; want 3 untouched", got, err)
		}
		plain := mustAcquire(t, c, key, time.Minute)
		wantSlotLock(t, c, plain, key, 2)
	})
}

// TestPlainReleaseOnALoweredSemaphore: the slot-0 holder of a semaphore whose N was lowered to 1
// releases without WithPermits (ReleaseToken, and Release of a lock acquired before the lock became
// a semaphore); neither hands slot 0 to the waiting head while 1 or more slots stay held, and the
// last release hands it.
func TestPlainReleaseOnALoweredSemaphore(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()

	t.Run("ReleaseToken", func(t *testing.T) {
		key := uniqueKey(t)
		declare(t, c, key, 3)
		mustAcquire(t, c, key, time.Minute, WithPermits(3), WithToken("tok-a"), WithMetadata("a"))
		b := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("b"))
		mustAcquire(t, c, key, time.Minute, WithPermits(3), WithToken("tok-c"), WithMetadata("c"))
		mustQueue(t, c, key, "w", 1, 3, 1)
		if err := c.SetPermits(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.ReleaseToken(ctx, key, "tok-a", 0); err != nil {
			t.Fatal(err)
		}
		wantHolders(t, c, key, "", "b", "c")
		mustRelease(t, b)
		wantHolders(t, c, key, "", "", "c")
		if err := c.ReleaseToken(ctx, key, "tok-c", 0); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("ReleaseToken of slot 2 (a plain release is slot 0's): %v", err)
		}
		if err := c.ReleaseSlotToken(ctx, key, 2, "tok-c", 0); err != nil {
			t.Fatal(err)
		}
		wantHolders(t, c, key, "w", "", "")
		w := mustAcquire(t, c, key, time.Minute, WithQueue("w", 1, time.Minute))
		wantSlotLock(t, c, w, key, 0)
		if !w.Readopted() {
			t.Fatal("the waiter's slot 0 was not handed off to it")
		}
	})

	t.Run("Release of a plain lock", func(t *testing.T) {
		key := uniqueKey(t)
		p := mustAcquire(t, c, key, time.Minute, WithQueue("p", 0, time.Minute), WithMetadata("p"))
		if p.Semaphore() {
			t.Fatal("a plain lock says it is a semaphore")
		}
		if err := c.SetPermits(ctx, key, 3); err != nil {
			t.Fatal(err)
		}
		b := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("b"))
		wantSlotLock(t, c, b, key, 1)
		w := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithQueue("w", 1, time.Minute), WithMetadata("w"))
		wantSlotLock(t, c, w, key, 2)
		if err := c.SetPermits(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
		mustQueue(t, c, key, "x", 2, 1, 1)
		mustRelease(t, p)
		wantHolders(t, c, key, "", "b", "w")
		mustRelease(t, b)
		mustRelease(t, w)
		wantHolders(t, c, key, "x", "", "")
	})
}

// TestPlainDequeueOnASemaphore: Dequeue (not DequeueSlots) of a waiter a release handed slot 1
// gives the slot back, and it goes on to the next waiter.
func TestPlainDequeueOnASemaphore(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	y := twoQueuedHolders(t, c, key)
	plainQueue(t, c, key, "w1", 1, 1)
	plainQueue(t, c, key, "w2", 2, 2)
	mustRelease(t, y)
	wantHolders(t, c, key, "x", "w1")
	if err := c.Dequeue(ctx, key, "w1"); err != nil {
		t.Fatal(err)
	}
	wantHolders(t, c, key, "x", "w2")
	w2 := mustAcquire(t, c, key, time.Minute, WithQueue("w2", 2, time.Minute))
	wantSlotLock(t, c, w2, key, 1)
}

// TestLockSemaphore: Semaphore tells a plain lock from a semaphore's, acquired WithPermits (even 1)
// or diverted; Renew of a diverted lock renews its own slot.
func TestLockSemaphore(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	if l := mustAcquire(t, c, uniqueKey(t), time.Minute); l.Semaphore() {
		t.Fatal("plain lock: Semaphore() = true")
	}
	if l := mustAcquire(t, c, uniqueKey(t), time.Minute, WithPermits(1)); !l.Semaphore() {
		t.Fatal("WithPermits(1): Semaphore() = false")
	}
	if (*Lock)(nil).Semaphore() {
		t.Fatal("nil lock: Semaphore() = true")
	}

	key := uniqueKey(t)
	declare(t, c, key, 2)
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithMetadata("a"))
	d := mustAcquire(t, c, key, 500*time.Millisecond, WithMetadata("diverted"))
	wantSlotLock(t, c, d, key, 1)
	if err := d.Renew(ctx, time.Minute); err != nil {
		t.Fatalf("Renew of the diverted lock: %v", err)
	}
	states, err := c.InspectSlots(ctx, key, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !states[1].Held || states[1].TTL < 30*time.Second || states[1].Metadata != "diverted" {
		t.Fatalf("slot 1 after Renew: %+v, want held by diverted for about a minute", states[1])
	}
}

// TestSetPermits: N = 1 on a plain lock writes nothing; N = 3 makes a plain lock a semaphore that
// plain callers share; N = 1 on a semaphore is written while a slot above 0 is held and deletes
// the permits once none is; bad N and Redlock are refused, and N = 1 on
// Redlock does nothing.
func TestSetPermits(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	permitsKey := c.RedisKey(key) + ":permits"

	p := mustAcquire(t, c, key, time.Minute, WithMetadata("p"))
	if err := c.SetPermits(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Exists(ctx, permitsKey).Result(); err != nil || n != 0 {
		t.Fatalf("SetPermits(1) on a plain lock wrote %s (exists %d, %v)", permitsKey, n, err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("plain lock held: %v", err)
	}

	if err := c.SetPermits(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	q := mustAcquire(t, c, key, time.Minute, WithMetadata("q"))
	wantSlotLock(t, c, q, key, 1)
	wantHolders(t, c, key, "p", "q", "")
	if err := c.SetPermits(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := rc.Get(ctx, permitsKey).Result(); err != nil || got != "1" {
		t.Fatalf("SetPermits(1) on a semaphore with slot 1 held: %q, %v", got, err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("plain Acquire after N lowered to 1 under 2 holders: %v", err)
	}
	mustRelease(t, p)

	// Slot 1 drained: N = 1 makes the lock plain again, and it acquires as one.
	mustRelease(t, q)
	if err := c.SetPermits(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Exists(ctx, permitsKey).Result(); err != nil || n != 0 {
		t.Fatalf("SetPermits(1) on a semaphore with no slot above 0 held left %s (exists %d, %v)", permitsKey, n, err)
	}
	plain := mustAcquire(t, c, key, time.Minute)
	if plain.Semaphore() || plain.Slot() != 0 {
		t.Fatalf("after the permits were deleted: semaphore %v, slot %d; want the plain lock", plain.Semaphore(), plain.Slot())
	}
	mustRelease(t, plain)

	for _, n := range []int{0, -1, MaxPermits + 1} {
		if err := c.SetPermits(ctx, key, n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("SetPermits(%d): %v", n, err)
		}
	}
	if err := c.SetPermits(ctx, "bad{key}", 2); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetPermits of a bad key: %v", err)
	}

	rl, srvs := redlock(t, 3)
	if err := rl.SetPermits(ctx, key, 2); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Redlock SetPermits(2): %v", err)
	}
	if err := rl.SetPermits(ctx, key, 1); err != nil {
		t.Fatalf("Redlock SetPermits(1): %v", err)
	}
	for i, s := range srvs {
		if n, err := s.Client(t).Exists(ctx, rl.RedisKey(key)+":permits").Result(); err != nil || n != 0 {
			t.Fatalf("Redlock SetPermits(1) wrote node %d (exists %d, %v)", i, n, err)
		}
	}
}

// TestRedlockNodeWithPermitsDoesNotCount: nothing on Redlock writes :permits; a node where someone
// wrote it answers as a failed node (it is not diverted: a slot chosen per node is no lock), and
// the other nodes' majority still acquires, releases and dequeues.
func TestRedlockNodeWithPermitsDoesNotCount(t *testing.T) {
	rl, srvs := redlock(t, 3)
	ctx := context.Background()
	key := uniqueKey(t)
	if err := srvs[0].Client(t).Set(ctx, rl.RedisKey(key)+":permits", "3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, rl, key, time.Minute, WithQueue("a", 0, time.Minute))
	if l.Semaphore() {
		t.Fatal("a Redlock lock says it is a semaphore")
	}
	if n, err := srvs[0].Client(t).Exists(ctx, rl.RedisKey(key)).Result(); err != nil || n != 0 {
		t.Fatalf("the node with :permits granted the lock (exists %d, %v)", n, err)
	}
	if _, err := rl.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second Acquire on Redlock: %v", err)
	}
	if err := rl.Dequeue(ctx, key, "nobody"); err != nil {
		t.Fatalf("Dequeue with one node refusing: %v", err)
	}
	mustRelease(t, l)
}

// TestAcquisitionsNeverStorePermits: SetPermits is the one writer of a semaphore's N. An
// acquisition WithPermits(3) on a lock nobody declared stores nothing and is admitted as one of
// one (a caller that read a Lock since deleted cannot make the lock a semaphore); under a stored N
// of 2, lowered from 3, an acquisition that still asks for 3 (a caller reading a lagging cache) is
// refused while 2 are held, and the stored 2 stays.
func TestAcquisitionsNeverStorePermits(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()

	t.Run("nothing declared", func(t *testing.T) {
		key := uniqueKey(t)
		a := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("a"))
		wantSlotLock(t, c, a, key, 0)
		if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(3)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("second Acquire WithPermits(3) of a lock nobody declared: %v", err)
		}
		if n, err := rc.Exists(ctx, c.RedisKey(key)+":permits").Result(); err != nil || n != 0 {
			t.Fatalf("an acquisition stored permits (exists %d, %v)", n, err)
		}
	})

	t.Run("stale N", func(t *testing.T) {
		key := uniqueKey(t)
		declare(t, c, key, 3)
		mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("a"))
		mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("b"))
		declare(t, c, key, 2)
		if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(3), WithQueue("late", 0, time.Minute)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("Acquire WithPermits(3) under 2 of 2 held: %v", err)
		}
		if got, err := rc.Get(ctx, c.RedisKey(key)+":permits").Result(); err != nil || got != "2" {
			t.Fatalf("stored permits after a stale acquisition: %q, %v; want 2", got, err)
		}
		wantHolders(t, c, key, "a", "b", "")
	})
}

// TestSemaphores lists the locks whose permits are stored, and only those, under a key prefix that
// holds glob characters.
func TestSemaphores(t *testing.T) {
	_, srv, _ := single(t)
	c, err := New(srv.Client(t), WithKeyPrefix("lj*[x]:"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(srv.Client(t), WithKeyPrefix("other:"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b, plain := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	declare(t, c, a, 2)
	declare(t, c, b, 3)
	declare(t, other, uniqueKey(t), 2)
	mustAcquire(t, c, plain, time.Minute)
	got, err := c.Semaphores(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a, b}
	// Both sorted alike: the keys end in a sequence number, which may cross from 9 to 10.
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Semaphores = %q, want %q", got, want)
	}
}
