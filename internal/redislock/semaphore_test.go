package redislock_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// declare stores n as the permits of key, as the lock's one writer (the operator's view of a
// declared Lock) does: acquisitions read them and never write them.
func declare(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	if err := c.SetPermits(context.Background(), key, n); err != nil {
		t.Fatalf("SetPermits(%s, %d): %v", key, n, err)
	}
}

// mustQueue asks for a semaphore of n as a queued waiter and expects to stand at position.
func mustQueue(t *testing.T, c *Client, key, member string, score float64, n, position int) {
	t.Helper()
	_, err := c.Acquire(context.Background(), key, time.Minute, WithPermits(n), WithQueue(member, score, time.Minute), WithMetadata(member))
	qe, ok := errors.AsType[*QueuedError](err)
	if !ok || qe.Position != position {
		t.Fatalf("%s: Acquire = %v, want queued at position %d", member, err, position)
	}
}

// claim acquires what a release handed to member: slot, as a re-adoption.
func claim(t *testing.T, c *Client, key, member string, score float64, n, slot int) *Lock {
	t.Helper()
	l := mustAcquire(t, c, key, time.Minute, WithPermits(n), WithQueue(member, score, time.Minute), WithMetadata(member))
	if l.Slot() != slot || !l.Readopted() {
		t.Fatalf("%s: slot %d (readopted %v), want slot %d handed off", member, l.Slot(), l.Readopted(), slot)
	}
	return l
}

// slotHolders returns each slot's holder metadata ("" when free) of the first n slots.
func slotHolders(t *testing.T, c *Client, key string, n int) []string {
	t.Helper()
	states, err := c.InspectSlots(context.Background(), key, n)
	if err != nil {
		t.Fatalf("InspectSlots: %v", err)
	}
	holders := make([]string, n)
	for i, st := range states {
		if st.Held {
			holders[i] = st.Metadata
			if holders[i] == "" {
				holders[i] = "?"
			}
		}
	}
	return holders
}

func wantHolders(t *testing.T, c *Client, key string, want ...string) {
	t.Helper()
	if got := slotHolders(t, c, key, len(want)); !slices.Equal(got, want) {
		t.Fatalf("slot holders %q, want %q", got, want)
	}
}

// TestSemaphoreSlotsLeasesAndReadoption: each holder gets the lowest free slot with that slot's
// fence; a full semaphore refuses; the same token re-adopts its slot and fence; a lease that runs
// out frees its slot for the next holder, with a higher fence; the keeper renews a slot above 0.
func TestSemaphoreSlotsLeasesAndReadoption(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 3)

	a := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("a"))
	b := mustAcquire(t, c, key, 200*time.Millisecond, WithPermits(3), WithToken("token-b"), WithMetadata("b"))
	d := mustAcquire(t, c, key, 300*time.Millisecond, WithPermits(3), WithMetadata("d"))
	for i, l := range []*Lock{a, b, d} {
		if l.Slot() != i || l.Fence() <= 0 || l.Readopted() {
			t.Fatalf("holder %d: slot %d fence %d readopted %v", i, l.Slot(), l.Fence(), l.Readopted())
		}
	}
	if b.RedisKey() != a.RedisKey()+":s1" {
		t.Fatalf("slot 1 key %q, want %q", b.RedisKey(), a.RedisKey()+":s1")
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(3)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire of a full semaphore: %v", err)
	}
	states, err := c.InspectSlots(ctx, key, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !states[1].Held || states[1].Fence != b.Fence() || states[3].Held || states[3].Fence != 0 {
		t.Fatalf("InspectSlots: %+v", states)
	}

	again := mustAcquire(t, c, key, 200*time.Millisecond, WithPermits(3), WithToken("token-b"))
	if again.Slot() != 1 || again.Fence() != b.Fence() || !again.Readopted() {
		t.Fatalf("re-adoption: slot %d fence %d readopted %v; want slot 1 fence %d", again.Slot(), again.Fence(), again.Readopted(), b.Fence())
	}

	var renewals atomic.Int64
	k := c.NewKeeper(KeeperOptions{OnRenew: func(*Lock, error) { renewals.Add(1) }})
	defer k.Stop()
	if err := k.Add(d, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	// Inspect calls a lock with less than 1 ms left free (PTTL 0): ask for the slot instead.
	var e *Lock
	eventually(t, 3*time.Second, "slot 1's lease to run out", func() bool {
		e, err = c.Acquire(ctx, key, time.Minute, WithPermits(3), WithMetadata("e"))
		return err == nil
	})
	if e.Slot() != 1 || e.Fence() <= b.Fence() {
		t.Fatalf("after the lease ran out: slot %d fence %d, want slot 1 above fence %d", e.Slot(), e.Fence(), b.Fence())
	}
	eventually(t, 3*time.Second, "the keeper to renew slot 2 past its ttl", func() bool { return renewals.Load() >= 5 })
	wantHolders(t, c, key, "a", "e", "d")
	if ttl, err := d.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL of slot 2: %v, %v", ttl, err)
	}
	for _, l := range []*Lock{a, d, e} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release slot %d: %v", l.Slot(), err)
		}
	}
	wantHolders(t, c, key, "", "", "")
}

// TestSemaphoreQueuedHandoff: with every slot held, waiters line up by score (not by arrival); a
// release hands its slot to the head, says so on the release channel with the slot, and the
// head claims it with its next attempt, with a fence above the slot's last.
func TestSemaphoreQueuedHandoff(t *testing.T) {
	c, _, _ := single(t, WithReleaseNotifications(releaseChannel))
	ctx := t.Context()
	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	declare(t, c, key, 2)
	h0 := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("h0", 0, time.Minute))
	h1 := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("h1", 0, time.Minute))
	mustQueue(t, c, key, "late", 30, 2, 1)
	mustQueue(t, c, key, "early", 10, 2, 1)
	mustQueue(t, c, key, "middle", 20, 2, 2)
	if line, err := c.Lineup(ctx, key, 1, 2, 3); err != nil || !slices.Equal(line, []string{"early", "middle", "late"}) {
		t.Fatalf("Lineup: %v, %v", line, err)
	}

	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nextRelease(t, releases); got != (Released{Key: h0.RedisKey(), HandedTo: "early", Slot: 1}) {
		t.Fatalf("announced %+v", got)
	}
	wantHolders(t, c, key, "?", "early")
	early := claim(t, c, key, "early", 10, 2, 1)
	if early.Fence() <= h1.Fence() {
		t.Fatalf("handed-off fence %d, not above slot 1's last %d", early.Fence(), h1.Fence())
	}

	if err := h0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nextRelease(t, releases); got != (Released{Key: h0.RedisKey(), HandedTo: "middle"}) {
		t.Fatalf("announced %+v", got)
	}
	middle := claim(t, c, key, "middle", 20, 2, 0)
	if middle.Fence() <= h0.Fence() {
		t.Fatalf("handed-off fence %d, not above slot 0's last %d", middle.Fence(), h0.Fence())
	}
	mustQueue(t, c, key, "late", 30, 2, 1)
}

// TestSemaphoreDequeueHandsTheSlotOn: a waiter that gives up after a release handed it a slot
// gives the slot back, and it goes to the next waiter.
func TestSemaphoreDequeueHandsTheSlotOn(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	y := twoQueuedHolders(t, c, key)
	mustQueue(t, c, key, "w1", 1, 2, 1)
	mustQueue(t, c, key, "w2", 2, 2, 2)
	if err := y.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantHolders(t, c, key, "x", "w1")
	if err := c.DequeueSlots(ctx, key, "w1"); err != nil {
		t.Fatal(err)
	}
	wantHolders(t, c, key, "x", "w2")
	claim(t, c, key, "w2", 2, 2, 1)
	if err := c.DequeueSlots(ctx, key, "nobody"); err != nil {
		t.Fatalf("DequeueSlots of a member not queued: %v", err)
	}
	wantHolders(t, c, key, "x", "w2")
}

// TestSemaphorePermitsChangedAtRunTime: lowering N from 3 to 1 under 3 holders preempts nobody and
// lets nobody in until two of them released (the third release hands slot 0 to the waiter);
// raising N lets the next acquisition in at once.
func TestSemaphorePermitsChangedAtRunTime(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()

	t.Run("lower", func(t *testing.T) {
		key := uniqueKey(t)
		declare(t, c, key, 3)
		var holders []*Lock
		for _, m := range []string{"a", "b", "c"} {
			holders = append(holders, mustAcquire(t, c, key, time.Minute, WithPermits(3), WithQueue(m, 0, time.Minute), WithMetadata(m)))
		}
		declare(t, c, key, 1)
		mustQueue(t, c, key, "w", 1, 1, 1)
		if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(1)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("unqueued Acquire with N lowered to 1 under 3 holders: %v", err)
		}
		if err := holders[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantHolders(t, c, key, "", "b", "c")
		mustQueue(t, c, key, "w", 1, 1, 1)
		if err := holders[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantHolders(t, c, key, "", "", "c")
		mustQueue(t, c, key, "w", 1, 1, 1)
		for _, l := range holders[2:] {
			if _, err := l.TTL(ctx); err != nil {
				t.Fatalf("holder of slot %d preempted: %v", l.Slot(), err)
			}
		}
		if err := holders[2].Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantHolders(t, c, key, "w", "", "")
		claim(t, c, key, "w", 1, 1, 0)
	})

	t.Run("raise", func(t *testing.T) {
		key := uniqueKey(t)
		declare(t, c, key, 1)
		mustAcquire(t, c, key, time.Minute, WithPermits(1))
		if _, err := c.Acquire(ctx, key, time.Minute, WithPermits(1)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("second Acquire with N = 1: %v", err)
		}
		declare(t, c, key, 3)
		l := mustAcquire(t, c, key, time.Minute, WithPermits(3))
		if l.Slot() != 1 {
			t.Fatalf("after raising N: slot %d, want 1", l.Slot())
		}
	})
}

// TestSemaphoreRefusals: permits outside 1..64 are refused; Redlock refuses permits > 1 and the
// semaphore calls, and takes WithPermits(1) as the plain lock.
func TestSemaphoreRefusals(t *testing.T) {
	ctx := context.Background()
	single, _, _ := single(t)
	for _, n := range []int{-1, 65} {
		if _, err := single.Acquire(ctx, uniqueKey(t), time.Minute, WithPermits(n)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("WithPermits(%d): %v", n, err)
		}
	}
	if _, err := single.InspectSlots(ctx, uniqueKey(t), 65); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("InspectSlots of 65: %v", err)
	}

	rl, _ := redlock(t, 3)
	key := uniqueKey(t)
	if _, err := rl.Acquire(ctx, key, time.Minute, WithPermits(2)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Redlock WithPermits(2): %v", err)
	}
	l := mustAcquire(t, rl, key, time.Minute, WithPermits(1))
	if l.Slot() != 0 {
		t.Fatalf("Redlock WithPermits(1): slot %d", l.Slot())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"ReleaseSlotToken": rl.ReleaseSlotToken(ctx, key, 1, "t", 0),
		"DequeueSlots":     rl.DequeueSlots(ctx, key, "m"),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Redlock %s: %v", name, err)
		}
	}
	if _, err := rl.InspectSlots(ctx, key, 2); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Redlock InspectSlots: %v", err)
	}
}

// TestReleaseSlotToken: a process that knows a slot and token but has no *Lock (an operator that
// restarted) releases the slot, and a wrong token or slot touches nothing.
func TestReleaseSlotToken(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 2)
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithMetadata("a"))
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithToken("tok"), WithMetadata("b"))
	if err := c.ReleaseSlotToken(ctx, key, 0, "tok", 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("wrong slot: %v", err)
	}
	if err := c.ReleaseSlotToken(ctx, key, 1, "other", 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("wrong token: %v", err)
	}
	if err := c.ReleaseSlotToken(ctx, key, 64, "tok", 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("slot 64: %v", err)
	}
	wantHolders(t, c, key, "a", "b")
	if err := c.ReleaseSlotToken(ctx, key, 1, "tok", 0); err != nil {
		t.Fatal(err)
	}
	wantHolders(t, c, key, "a", "")
}

// TestSemaphoreFailedAttemptUndoesItsSlot: an acquisition that no replica acknowledged is undone
// (undoslots.lua finds the slot the attempt was granted), and the other holders keep theirs.
func TestSemaphoreFailedAttemptUndoesItsSlot(t *testing.T) {
	c, _, rc := single(t)
	key := uniqueKey(t)
	declare(t, c, key, 3)
	mustAcquire(t, c, key, time.Minute, WithPermits(3), WithMetadata("a"))
	waiting, err := New(rc, WithWaitReplicas(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiting.Acquire(context.Background(), key, time.Minute, WithPermits(3), WithMetadata("b")); err == nil {
		t.Fatal("Acquire with no replica to acknowledge it succeeded")
	}
	wantHolders(t, c, key, "a", "", "")
}

// TestSemaphoreHostileInput: a :permits key that holds no number (someone else wrote it) does not
// break a release, which then hands off as for 1 permit; a forged or old release message reads as
// slot 0.
func TestSemaphoreHostileInput(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications(releaseChannel))
	ctx := t.Context()
	key := uniqueKey(t)
	declare(t, c, key, 2)
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("a", 0, time.Minute), WithMetadata("a"))
	b := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("b", 0, time.Minute), WithMetadata("b"))
	mustQueue(t, c, key, "w", 1, 2, 1)
	if err := rc.Set(ctx, c.RedisKey(key)+":permits", "lots", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release with a garbled :permits: %v", err)
	}
	wantHolders(t, c, key, "a", "") // as for 1 permit: slot 0 is still held, nothing is handed off

	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for payload, want := range map[string]Released{
		"k\x00f\x00l\x00a\x00m":        {Key: "k", HandedTo: "m"},
		"k\x00f\x00l\x00a\x00m\x00x":   {Key: "k", HandedTo: "m"},
		"k\x00f\x00l\x00a\x00m\x00-3":  {Key: "k", HandedTo: "m"},
		"k\x00f\x00l\x00a\x00m\x0064":  {Key: "k", HandedTo: "m"},
		"k\x00f\x00l\x00a\x00m\x00007": {Key: "k", HandedTo: "m", Slot: 7},
	} {
		if err := rc.Publish(ctx, releaseChannel, payload).Err(); err != nil {
			t.Fatal(err)
		}
		if got := nextRelease(t, releases); got != want {
			t.Fatalf("message %q read as %+v, want %+v", payload, got, want)
		}
	}
}

// twoQueuedHolders fills a semaphore of two permits with the queued holders x and y, in that order,
// and returns y's lock.
func twoQueuedHolders(t *testing.T, c *Client, key string) *Lock {
	t.Helper()
	declare(t, c, key, 2)
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("x", 0, time.Minute), WithMetadata("x"))
	return mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("y", 0, time.Minute), WithMetadata("y"))
}
