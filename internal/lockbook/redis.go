package lockbook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The book is the operator's one door to Redis: every acquisition, re-adoption, release, queue
// call and read goes through the methods below, so what the operator asks of the lock library can
// be read, counted and changed in one place. The book's client is its own (cmd/manager builds it
// and hands it to New); the reconcilers know the library only by the names in outcomes.go and by
// the Lock of lock.go, which reaches no Redis. door_test.go keeps every other package off the library.

// Claim names one workload's lock as the lock library knows it: what every call about it carries.
type Claim struct {
	Key    string // the lock's name in the lock library (the reconciler's lockName)
	Token  string // the workload's derived token (Identity.Token)
	Holder string // its holder name, also its member in the lock's queue (Identity.Holder)
	// Permits is how many may hold the lock at once, as its Lock declares (see
	// locks.PermitReader): an acquisition passes it when more than one, and it only lowers what
	// Redis admits (never stored). 0 or 1: the library obeys what Redis keeps.
	Permits int
	// Slot is the semaphore slot status records this workload holds (nil: a plain lock, slot 0).
	Slot *int32
	// Fence is the fencing token of the grant this claim holds (0: none known), which a release
	// that finds the lock not ours compares with the lock's last one (Book.Release).
	Fence int64
}

// acquireOptions are the options every acquisition of c carries.
func (c Claim) acquireOptions() []redislock.AcquireOption {
	opts := []redislock.AcquireOption{redislock.WithToken(c.Token), redislock.WithMetadata(c.Holder)}
	if c.Permits > 1 {
		opts = append(opts, redislock.WithPermits(c.Permits))
	}
	return opts
}

// Acquire asks for the lock as a queued waiter: Redis hands a free lock to the head of the queue
// only, and a waiter that is not the head gets a *redislock.QueuedError (ErrNotAcquired) with its
// place and the holder. score orders the queue; liveness is how long the waiter stays queued
// without a call that keeps it.
func (b *Book) Acquire(ctx context.Context, c Claim, ttl time.Duration, score float64, liveness time.Duration) (*Lock, error) {
	l, err := b.redis.Acquire(ctx, c.Key, ttl, append(c.acquireOptions(), redislock.WithQueue(c.Holder, score, liveness))...)
	return held(l), err
}

// Join stands the claim's holder in the lock's queue as Acquire would, with the same ticket, but
// takes nothing: a release hands the lock to it when its turn comes, and a workload that must
// store something before it may hold a lock (a finalizer) stands in line before that write. The
// answer is a *redislock.QueuedError; its Free says the lock is free for this holder, which only
// Acquire takes. On Redlock, which hands nothing over, Join is refused (HandsOff).
func (b *Book) Join(ctx context.Context, c Claim, ttl time.Duration, score float64, liveness time.Duration) error {
	return b.redis.Join(ctx, c.Key, ttl, append(c.acquireOptions(), redislock.WithQueue(c.Holder, score, liveness))...)
}

// Readopt asks for the lock with the workload's own token, outside the queue: it finds a lock
// that is still ours (Lock.Readopted), acquires it afresh if it is free, and returns ErrNotAcquired
// if another holder has it. First, in the same script, it reads the release mark of the claim's
// fence (and slot): when the claim's own token released that acquisition (a deposed leader's pass
// or its successor's, or one whose record a crash cut off) it takes nothing and returns
// ErrReleasedBefore, whoever holds the lock now. Re-adopting would otherwise take the lock afresh,
// or find it taken, and end the workload lost although its work ran alone (found by the operator
// model with a deposed leader). The release came at the work's outcome or once its pods were gone.
func (b *Book) Readopt(ctx context.Context, c Claim, ttl time.Duration) (*Lock, error) {
	opts := c.acquireOptions()
	if c.Fence > 0 {
		slot := 0
		if c.Slot != nil {
			slot = int(*c.Slot)
		}
		opts = append(opts, redislock.WithRecordedFence(c.Fence, slot))
	}
	l, err := b.redis.Acquire(ctx, c.Key, ttl, opts...)
	return held(l), err
}

// Release deletes the lock if it is held with the claim's token (no *Lock needed, so it works after
// a restart), handing it to the head of its queue. It returns ErrNotHeld when the lock was not ours,
// and ErrLapsedUntaken (which wraps it) when it was not ours only because its lease ran out and
// nobody was granted it since (lapsedUntaken). A semaphore's holder releases its slot.
func (b *Book) Release(ctx context.Context, c Claim) error {
	var err error
	if c.Slot != nil {
		err = b.redis.ReleaseSlotToken(ctx, c.Key, int(*c.Slot), c.Token, c.Fence)
	} else {
		err = b.redis.ReleaseToken(ctx, c.Key, c.Token, c.Fence)
	}
	if !errors.Is(err, ErrNotHeld) || !b.lapsedUntaken(ctx, c) {
		return err
	}
	return fmt.Errorf("release %s: %w", c.Key, ErrLapsedUntaken)
}

// lapsedUntaken reports whether the claim's lock (its slot) is free and its last fencing token is
// still the claim's: nobody was granted it after the claimant, since every grant, a handoff or a
// re-adoption after a lapse included, stores a higher token and the fence key never expires. An
// operator that was away while its holder's Job ended finds the lease run out; if so, the Job ran
// alone and may end Succeeded, not LockLost. A failed read, a claim without a fence, and Redlock
// (a node restarted empty can hide a later grant from a quorum's answers) report false: the
// caller then keeps to ErrNotHeld. Like every guarantee, it assumes Redis keeps acknowledged writes
// (docs/design.md): a failover that dropped a later grant would hide it.
func (b *Book) lapsedUntaken(ctx context.Context, c Claim) bool {
	if c.Fence <= 0 || b.redis.Nodes() > 1 {
		return false
	}
	var st State
	if c.Slot != nil && *c.Slot > 0 {
		slots, err := b.redis.InspectSlots(ctx, c.Key, int(*c.Slot)+1)
		if err != nil {
			return false
		}
		st = slots[*c.Slot]
	} else {
		var err error
		if st, err = b.redis.Inspect(ctx, c.Key); err != nil {
			return false
		}
	}
	return !st.Held && st.Fence == c.Fence
}

// Dequeue takes the claim's holder out of the lock's queue, giving back a lock handed to it that it
// never used.
func (b *Book) Dequeue(ctx context.Context, c Claim) error {
	return b.redis.Dequeue(ctx, c.Key, c.Holder)
}

// Inspect reads the lock named key without acquiring it.
func (b *Book) Inspect(ctx context.Context, key string) (redislock.State, error) {
	return b.redis.Inspect(ctx, key)
}

// Slots reads every slot of the lock named key, index = slot, holders or not (their last fences):
// all of a semaphore's slots, also those above today's permits that holders keep after the number
// was lowered. On Redlock, where a lock has one holder, only slot 0.
func (b *Book) Slots(ctx context.Context, key string) (Slots, error) {
	if b.redis.Admits(redislock.MaxPermits) == 1 { // Redlock
		st, err := b.redis.Inspect(ctx, key)
		return Slots{st}, err
	}
	return b.redis.InspectSlots(ctx, key, redislock.MaxPermits)
}

// Slots are a lock's slots as Redis has them, index = slot, and what the reconcilers count of them.
type Slots []State

// InUse is how many slots are held.
func (s Slots) InUse() int {
	n := 0
	for _, st := range s {
		if st.Held {
			n++
		}
	}
	return n
}

// AHolder is the name of one holder (the one of the lowest slot held), or "".
func (s Slots) AHolder() string {
	for _, st := range s {
		if st.Held {
			return st.Metadata
		}
	}
	return ""
}

// HeldAbove reports whether a slot above slot is held.
func (s Slots) HeldAbove(slot int) bool {
	return slot+1 < len(s) && s[slot+1:].InUse() > 0
}

// Admits is how many may hold at once a lock that declares n permits, on the book's Redis: n, or
// one on Redlock.
func (b *Book) Admits(n int) int { return b.redis.Admits(n) }

// SetPermits writes how many may hold the lock named key at once, for the releases and
// acquisitions that follow (see redislock.Client.SetPermits).
func (b *Book) SetPermits(ctx context.Context, key string, n int) error {
	return b.redis.SetPermits(ctx, key, n)
}

// Announce tells the Redis that member speaks this library's lock protocol, and returns the clients
// that announce an older one.
func (b *Book) Announce(ctx context.Context, member string, lease time.Duration) ([]redislock.Announced, error) {
	return b.redis.Announce(ctx, member, lease)
}

// ShortLease says whether a lease of ttl is too short for the round trip to Redis the keeper has
// measured, that round trip, and the smallest ttl it allows (redislock.Client.MinTTL); false
// before the keeper measured one.
func (b *Book) ShortLease(ttl time.Duration) (short bool, rtt, least time.Duration) {
	rtt = b.keeper.RoundTrip()
	if rtt <= 0 {
		return false, 0, 0
	}
	least = b.redis.MinTTL(rtt)
	return ttl < least, rtt, least
}

// Withdraw removes member's announcement (see Announce).
func (b *Book) Withdraw(ctx context.Context, member string) error {
	return b.redis.Withdraw(ctx, member)
}

// Semaphores lists the locks whose permits Redis stores (a keyspace scan: seldom).
func (b *Book) Semaphores(ctx context.Context) ([]string, error) { return b.redis.Semaphores(ctx) }

// QueueState reads how many wait for the lock named key and who is at the head (not on Redlock).
func (b *Book) QueueState(ctx context.Context, key string) (redislock.QueueState, error) {
	return b.redis.QueueState(ctx, key)
}

// RedisKey is the Redis key of the lock named key, as status shows it.
func (b *Book) RedisKey(key string) string { return b.redis.RedisKey(key) }

// LibraryKey is the lock's name in the lock library for its key in Redis (what status.lockKey
// records), inverting RedisKey; false if redisKey is not one of this book's keys.
func (b *Book) LibraryKey(redisKey string) (string, bool) {
	prefix := strings.TrimSuffix(b.redis.RedisKey(""), "{}")
	rest, ok := strings.CutPrefix(redisKey, prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") || len(rest) < 2 {
		return "", false
	}
	return strings.TrimSuffix(rest, "}"), true
}

// HandsOff reports whether a release hands the lock to the head of its queue (not on Redlock).
func (b *Book) HandsOff() bool { return b.redis.HandsOff() }

// Lineup returns the queue members at the given 1-based places of the lock named key.
func (b *Book) Lineup(ctx context.Context, key string, places ...int) ([]string, error) {
	return b.redis.Lineup(ctx, key, places...)
}

// KeepQueued keeps members queued for another liveness and returns those no longer in the queue.
func (b *Book) KeepQueued(ctx context.Context, key string, liveness time.Duration, members ...string) ([]string, error) {
	return b.redis.KeepQueued(ctx, key, liveness, members...)
}

// SubscribeReleases announces releases and handoffs until ctx ends (see redislock).
func (b *Book) SubscribeReleases(ctx context.Context) (<-chan redislock.Released, error) {
	return b.redis.SubscribeReleases(ctx)
}
