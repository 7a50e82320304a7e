package redislock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// releaseMarkRetention is the retention these tests ask for.
const releaseMarkRetention = 10 * time.Minute

// marked is a client over one real redis-server that leaves release marks.
func marked(t *testing.T) (*Client, *redis.Client) {
	t.Helper()
	c, _, rc := single(t, WithReleaseMarkRetention(releaseMarkRetention))
	return c, rc
}

// markKey is the release mark's key of token's release of the lock (the slot) whose Redis key is
// lockKey (releasemark.lua).
func markKey(lockKey, token string) string {
	sum := sha1.Sum([]byte(token))
	return lockKey + ":released:" + hex.EncodeToString(sum[:])
}

// TestReleaseMarkTellsAnOwnReleaseFromALoss: a holder that released and asks again, after the next
// holder took the lock, hears that its release was done (nil), not ErrNotHeld; a holder whose lock
// was taken from it without a release, a wrong fence and an unknown one still hear ErrNotHeld, and
// the next holder's lock is untouched by any of them.
func TestReleaseMarkTellsAnOwnReleaseFromALoss(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "queued"}[queued]
		t.Run(name, func(t *testing.T) {
			c, rc := marked(t)
			ctx := context.Background()
			key := uniqueKey(t)
			var opts []AcquireOption
			if queued {
				opts = append(opts, WithQueue("a", 0, time.Minute))
			}
			a := mustAcquire(t, c, key, time.Minute, append(opts, WithToken("tok-a"))...)
			if err := c.ReleaseToken(ctx, key, "tok-a", a.Fence()); err != nil {
				t.Fatalf("first release: %v", err)
			}
			if queued {
				opts = []AcquireOption{WithQueue("b", 0, time.Minute)}
			}
			b := mustAcquire(t, c, key, time.Minute, append(opts, WithToken("tok-b"))...)

			if err := c.ReleaseToken(ctx, key, "tok-a", a.Fence()); err != nil {
				t.Fatalf("a release asked again after b acquired: %v, want nil (the mark)", err)
			}
			for what, fence := range map[string]int64{"another fence": a.Fence() + 1, "no fence": 0, "b's fence": b.Fence()} {
				if err := c.ReleaseToken(ctx, key, "tok-a", fence); !errors.Is(err, ErrNotHeld) {
					t.Errorf("a's release with %s: %v, want ErrNotHeld", what, err)
				}
			}
			// b's lock goes without a release (as a lease runs out); c takes it: b's release is a loss.
			if err := rc.Del(ctx, c.RedisKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			next := mustAcquire(t, c, key, time.Minute, WithToken("tok-c"))
			if err := c.ReleaseToken(ctx, key, "tok-b", b.Fence()); !errors.Is(err, ErrNotHeld) {
				t.Errorf("b's release after its lock was taken: %v, want ErrNotHeld", err)
			}
			st, err := c.Inspect(ctx, key)
			if err != nil || !st.Held || st.Fence != next.Fence() {
				t.Fatalf("the holder's lock after the others' releases: %+v, %v; want held with fence %d", st, err, next.Fence())
			}
			ttl := rc.PTTL(ctx, markKey(c.RedisKey(key), "tok-a")).Val()
			if ttl <= 0 || ttl > releaseMarkRetention {
				t.Errorf("the mark's time to live %v; want within (0, %v]", ttl, releaseMarkRetention)
			}
		})
	}
}

// TestReleaseMarkOfASlot: ReleaseSlotToken leaves and reads the mark of its slot.
func TestReleaseMarkOfASlot(t *testing.T) {
	c, _ := marked(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 2)
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithMetadata("a"))
	b := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithToken("tok"), WithMetadata("b"))
	if err := c.ReleaseSlotToken(ctx, key, b.Slot(), "tok", b.Fence()); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, key, time.Minute, WithPermits(2), WithMetadata("c"))
	wantHolders(t, c, key, "a", "c")
	if err := c.ReleaseSlotToken(ctx, key, b.Slot(), "tok", b.Fence()); err != nil {
		t.Fatalf("the slot's release asked again: %v, want nil (the mark)", err)
	}
	if err := c.ReleaseSlotToken(ctx, key, 0, "tok", b.Fence()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("another slot's release: %v, want ErrNotHeld", err)
	}
	wantHolders(t, c, key, "a", "c")
}

// TestReleaseMarkNeedsTheRelease: the mark a Lock's Release leaves answers a release asked again;
// without marks asked for and on Redlock, a release asked again after the next holder took the
// lock is ErrNotHeld, as before, and no mark is written.
func TestReleaseMarkNeedsTheRelease(t *testing.T) {
	ctx := context.Background()
	again := func(t *testing.T, c *Client, nodes []*redis.Client, want error) {
		t.Helper()
		key := uniqueKey(t)
		a := mustAcquire(t, c, key, time.Minute, WithToken("tok-a"))
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, c, key, time.Minute, WithToken("tok-b"))
		if err := c.ReleaseToken(ctx, key, "tok-a", a.Fence()); !errors.Is(err, want) {
			t.Fatalf("the release asked again: %v, want %v", err, want)
		}
		marks := 0
		for _, n := range nodes {
			marks += int(n.Exists(ctx, markKey(c.RedisKey(key), "tok-a")).Val())
		}
		if wantMarks := map[bool]int{true: 1, false: 0}[want == nil]; marks != wantMarks {
			t.Fatalf("%d release marks on the nodes, want %d", marks, wantMarks)
		}
	}
	t.Run("one Redis", func(t *testing.T) {
		c, rc := marked(t)
		again(t, c, []*redis.Client{rc}, nil)
	})
	t.Run("no marks asked for", func(t *testing.T) {
		c, _, rc := single(t)
		again(t, c, []*redis.Client{rc}, ErrNotHeld)
	})
	t.Run("Redlock", func(t *testing.T) {
		c, srvs := redlock(t, 3, WithReleaseMarkRetention(releaseMarkRetention))
		var nodes []*redis.Client
		for _, s := range srvs {
			nodes = append(nodes, s.Client(t))
		}
		again(t, c, nodes, ErrNotHeld)
	})
}

// TestReleaseMarksAreWhatIsLeft: after two holders of a semaphore released their slots and its
// waiter gave up, the lock's keys in Redis are its fence counters, its stored N and one release
// mark per slot, which IsReleaseMark tells; a lock named like a mark is judged by what follows its
// braces.
func TestReleaseMarksAreWhatIsLeft(t *testing.T) {
	c, rc := marked(t)
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 2)
	a := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("a", 0, time.Minute))
	b := mustAcquire(t, c, key, time.Minute, WithPermits(2), WithQueue("b", 0, time.Minute))
	mustQueue(t, c, key, "w", 1, 2, 1)
	if err := c.Dequeue(ctx, key, "w"); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lock{a, b} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	base := c.RedisKey(key)
	var marks []string
	for _, k := range rc.Keys(ctx, base+"*").Val() {
		switch {
		case IsReleaseMark(k):
			marks = append(marks, k)
		case k != base+":fence" && k != base+":s1:fence" && k != base+":permits":
			t.Errorf("%s is left after every holder and waiter went", k)
		}
	}
	slices.Sort(marks)
	if want := []string{markKey(base, a.Token()), markKey(base+":s1", b.Token())}; !slices.Equal(marks, want) {
		t.Errorf("release marks %v, want %v (one per slot released)", marks, want)
	}
	for _, k := range []string{base, base + ":meta", base + ":fence", "{x:released:}", "{x}:queue"} {
		if IsReleaseMark(k) {
			t.Errorf("IsReleaseMark(%q) = true", k)
		}
	}
}

// TestReleasedBeforeReadsTheMark: after a holder's release, ReleasedBefore says so for its token and
// fence, on the lock and on a semaphore's slot, whoever holds the lock since; not for another
// fence, another token, a lock taken from the holder without a release, nor without marks.
func TestReleasedBeforeReadsTheMark(t *testing.T) {
	c, _ := marked(t)
	ctx := context.Background()
	released := func(c *Client, key string, slot int, token string, fence int64) bool {
		t.Helper()
		ok, err := c.ReleasedBefore(ctx, key, slot, token, fence)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	key := uniqueKey(t)
	a := mustAcquire(t, c, key, time.Minute, WithToken("tok-a"))
	if released(c, key, 0, "tok-a", a.Fence()) {
		t.Fatal("a lock still held reads as released")
	}
	if err := c.ReleaseToken(ctx, key, "tok-a", a.Fence()); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, c, key, time.Minute, WithToken("tok-b"))
	if !released(c, key, 0, "tok-a", a.Fence()) {
		t.Error("a's release under its fence does not read as released once b holds the lock")
	}
	if released(c, key, 0, "tok-a", a.Fence()+1) || released(c, key, 0, "tok-a", 0) || released(c, key, 0, "tok-b", b.Fence()) {
		t.Error("another fence, no fence, or a holder that never released reads as released")
	}

	// A semaphore's slot keeps its own marks.
	sem := uniqueKey(t)
	declare(t, c, sem, 2)
	s1 := mustAcquire(t, c, sem, time.Minute, WithToken("tok-s0"), WithPermits(2))
	s2 := mustAcquire(t, c, sem, time.Minute, WithToken("tok-s1"), WithPermits(2))
	if err := c.ReleaseSlotToken(ctx, sem, s2.Slot(), "tok-s1", s2.Fence()); err != nil {
		t.Fatal(err)
	}
	if !released(c, sem, s2.Slot(), "tok-s1", s2.Fence()) || released(c, sem, s1.Slot(), "tok-s0", s1.Fence()) {
		t.Errorf("slot %d's release, and slot %d held: marks read wrong", s2.Slot(), s1.Slot())
	}

	plain, _, _ := single(t)
	l := mustAcquire(t, plain, key+"-plain", time.Minute, WithToken("tok-p"))
	if err := plain.ReleaseToken(ctx, key+"-plain", "tok-p", l.Fence()); err != nil {
		t.Fatal(err)
	}
	if released(plain, key+"-plain", 0, "tok-p", l.Fence()) {
		t.Error("a client that leaves no marks reads a release")
	}
}

// TestAcquireWithRecordedFenceFindsItsOwnRelease: a re-adoption WithRecordedFence whose token
// released that acquisition (the mark) takes nothing and hears ErrReleasedBefore, whether the lock
// is free or another's since, on a plain lock and on a semaphore's slot (asked as a semaphore, or
// diverted from the plain script); it re-adopts a lock still held with its token, and another fence
// or no marks leave Acquire as it was.
func TestAcquireWithRecordedFenceFindsItsOwnRelease(t *testing.T) {
	c, rc := marked(t)
	ctx := context.Background()
	readopt := func(c *Client, key, token string, fence int64, slot int, opts ...AcquireOption) (*Lock, error) {
		return c.Acquire(ctx, key, time.Minute, append([]AcquireOption{WithToken(token), WithRecordedFence(fence, slot)}, opts...)...)
	}
	heldBy := func(key string) string {
		v, err := rc.Get(ctx, c.RedisKey(key)).Result()
		if errors.Is(err, redis.Nil) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	key := uniqueKey(t)
	a := mustAcquire(t, c, key, time.Minute, WithToken("tok-a"))
	if l, err := readopt(c, key, "tok-a", a.Fence(), 0); err != nil || !l.Readopted() || l.Fence() != a.Fence() {
		t.Fatalf("a lock still held with its token: %v, %v; want it re-adopted under fence %d", l, err, a.Fence())
	}
	if err := c.ReleaseToken(ctx, key, "tok-a", a.Fence()); err != nil {
		t.Fatal(err)
	}
	if _, err := readopt(c, key, "tok-a", a.Fence(), 0); !errors.Is(err, ErrReleasedBefore) {
		t.Fatalf("released, the lock free: %v, want ErrReleasedBefore", err)
	}
	if v := heldBy(key); v != "" {
		t.Fatalf("the re-adoption that found its release took the free lock: %q", v)
	}
	b := mustAcquire(t, c, key, time.Minute, WithToken("tok-b"))
	if _, err := readopt(c, key, "tok-a", a.Fence(), 0); !errors.Is(err, ErrReleasedBefore) {
		t.Fatalf("released, the lock another's: %v, want ErrReleasedBefore", err)
	}
	if _, err := readopt(c, key, "tok-a", a.Fence()+1, 0); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another fence, the lock another's: %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := readopt(c, key, "tok-a", a.Fence()+1, 0); err != nil || l.Readopted() {
		t.Fatalf("another fence, the lock free: %v, %v; want it granted afresh", l, err)
	}

	sem := uniqueKey(t)
	declare(t, c, sem, 2)
	mustAcquire(t, c, sem, time.Minute, WithToken("tok-s0"), WithPermits(2))
	s := mustAcquire(t, c, sem, time.Minute, WithToken("tok-s1"), WithPermits(2))
	if err := c.ReleaseSlotToken(ctx, sem, s.Slot(), "tok-s1", s.Fence()); err != nil {
		t.Fatal(err)
	}
	if _, err := readopt(c, sem, "tok-s1", s.Fence(), s.Slot(), WithPermits(2)); !errors.Is(err, ErrReleasedBefore) {
		t.Fatalf("a semaphore's slot released: %v, want ErrReleasedBefore", err)
	}
	if _, err := readopt(c, sem, "tok-s1", s.Fence(), s.Slot()); !errors.Is(err, ErrReleasedBefore) {
		t.Fatalf("a semaphore's slot released, asked by the plain script: %v, want ErrReleasedBefore", err)
	}
	if _, err := readopt(c, sem, "tok-s1", s.Fence(), 0, WithPermits(2)); errors.Is(err, ErrReleasedBefore) {
		t.Fatal("the mark of one slot read for another")
	}

	if _, err := readopt(c, key, "tok-q", 1, 0, WithQueue("q", 1, time.Minute)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WithRecordedFence with WithQueue: %v, want ErrInvalidArgument", err)
	}

	plain, _, _ := single(t)
	pk := uniqueKey(t)
	p := mustAcquire(t, plain, pk, time.Minute, WithToken("tok-p"))
	if err := plain.ReleaseToken(ctx, pk, "tok-p", p.Fence()); err != nil {
		t.Fatal(err)
	}
	if l, err := readopt(plain, pk, "tok-p", p.Fence(), 0); err != nil || l.Readopted() {
		t.Fatalf("a client that leaves no marks: %v, %v; want the free lock granted afresh", l, err)
	}
}
