package controllers

import (
	"context"
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The book is the controller's one door to Redis: every acquisition, re-adoption, release, queue
// call and read goes through the methods below, so what the operator asks of the lock library can
// be read, counted and changed in one place. The rest of the package uses the library's types and
// errors only.

// claim names one LockedJob's lock as the lock library knows it: what every call about it carries.
type claim struct {
	key    string // the lock's name in the lock library (see lockName)
	token  string // the LockedJob's derived token (Identity.Token)
	holder string // its holder name, also its member in the lock's queue (Identity.Holder)
	// permits is how many may hold the lock at once, as its Lock declares (see
	// locks.PermitReader): an acquisition passes it when more than one, and it only lowers what
	// Redis admits (never stored). 0 or 1: the library obeys what Redis keeps.
	permits int
	// slot is the semaphore slot status records this LockedJob holds (nil: a plain lock, slot 0).
	slot *int32
}

// acquireOptions are the options every acquisition of c carries.
func (c claim) acquireOptions() []redislock.AcquireOption {
	opts := []redislock.AcquireOption{redislock.WithToken(c.token), redislock.WithMetadata(c.holder)}
	if c.permits > 1 {
		opts = append(opts, redislock.WithPermits(c.permits))
	}
	return opts
}

// Acquire asks for the lock as a queued waiter: Redis hands a free lock to the head of the queue
// only, and a waiter that is not the head gets a *redislock.QueuedError (ErrNotAcquired) with its
// place and the holder. score orders the queue; liveness is how long the waiter stays queued
// without a call that keeps it.
func (b *LockBook) Acquire(ctx context.Context, c claim, ttl time.Duration, score float64, liveness time.Duration) (*redislock.Lock, error) {
	return b.redis.Acquire(ctx, c.key, ttl, append(c.acquireOptions(), redislock.WithQueue(c.holder, score, liveness))...)
}

// Readopt asks for the lock with the LockedJob's own token, outside the queue: it finds a lock
// that is still ours (Lock.Readopted), acquires it afresh if it is free, and returns ErrNotAcquired
// if another holder has it.
func (b *LockBook) Readopt(ctx context.Context, c claim, ttl time.Duration) (*redislock.Lock, error) {
	return b.redis.Acquire(ctx, c.key, ttl, c.acquireOptions()...)
}

// Release deletes the lock if it is held with the claim's token (no *Lock needed, so it works after
// a restart), handing it to the head of its queue. It returns ErrNotHeld when the lock was not ours.
// A semaphore's holder releases its slot.
func (b *LockBook) Release(ctx context.Context, c claim) error {
	if c.slot != nil {
		return b.redis.ReleaseSlotToken(ctx, c.key, int(*c.slot), c.token)
	}
	return b.redis.ReleaseToken(ctx, c.key, c.token)
}

// Dequeue takes the claim's holder out of the lock's queue, giving back a lock handed to it that it
// never used.
func (b *LockBook) Dequeue(ctx context.Context, c claim) error {
	return b.redis.Dequeue(ctx, c.key, c.holder)
}

// Inspect reads the lock named key without acquiring it.
func (b *LockBook) Inspect(ctx context.Context, key string) (redislock.State, error) {
	return b.redis.Inspect(ctx, key)
}

// Slots reads every slot of the lock named key, index = slot, holders or not (their last fences):
// all of a semaphore's slots, also those above today's permits that holders keep after the number
// was lowered. On Redlock, where a lock has one holder, only slot 0.
func (b *LockBook) Slots(ctx context.Context, key string) ([]redislock.State, error) {
	if !b.redis.HandsOff() {
		st, err := b.redis.Inspect(ctx, key)
		return []redislock.State{st}, err
	}
	return b.redis.InspectSlots(ctx, key, redislock.MaxPermits)
}

// SetPermits writes how many may hold the lock named key at once, for the releases and
// acquisitions that follow (see redislock.Client.SetPermits).
func (b *LockBook) SetPermits(ctx context.Context, key string, n int) error {
	return b.redis.SetPermits(ctx, key, n)
}

// Announce tells the Redis that member speaks this library's lock protocol, and returns the clients
// that announce an older one.
func (b *LockBook) Announce(ctx context.Context, member string, lease time.Duration) ([]redislock.Announced, error) {
	return b.redis.Announce(ctx, member, lease)
}

// ShortLease says whether a lease of ttl is too short for the round trip to Redis the keeper has
// measured, that round trip, and the smallest ttl it allows (redislock.Client.MinTTL); false
// before the keeper measured one.
func (b *LockBook) ShortLease(ttl time.Duration) (short bool, rtt, least time.Duration) {
	rtt = b.keeper.RoundTrip()
	if rtt <= 0 {
		return false, 0, 0
	}
	least = b.redis.MinTTL(rtt)
	return ttl < least, rtt, least
}

// Withdraw removes member's announcement (see Announce).
func (b *LockBook) Withdraw(ctx context.Context, member string) error {
	return b.redis.Withdraw(ctx, member)
}

// Semaphores lists the locks whose permits Redis stores (a keyspace scan: seldom).
func (b *LockBook) Semaphores(ctx context.Context) ([]string, error) { return b.redis.Semaphores(ctx) }

// QueueState reads how many wait for the lock named key and who is at the head (not on Redlock).
func (b *LockBook) QueueState(ctx context.Context, key string) (redislock.QueueState, error) {
	return b.redis.QueueState(ctx, key)
}

// RedisKey is the Redis key of the lock named key, as status shows it.
func (b *LockBook) RedisKey(key string) string { return b.redis.RedisKey(key) }

// HandsOff reports whether a release hands the lock to the head of its queue (not on Redlock).
func (b *LockBook) HandsOff() bool { return b.redis.HandsOff() }

// Lineup returns the queue members at the given 1-based places of the lock named key.
func (b *LockBook) Lineup(ctx context.Context, key string, places ...int) ([]string, error) {
	return b.redis.Lineup(ctx, key, places...)
}

// KeepQueued keeps members queued for another liveness and returns those no longer in the queue.
func (b *LockBook) KeepQueued(ctx context.Context, key string, liveness time.Duration, members ...string) ([]string, error) {
	return b.redis.KeepQueued(ctx, key, liveness, members...)
}

// SubscribeReleases announces releases and handoffs until ctx ends (see redislock).
func (b *LockBook) SubscribeReleases(ctx context.Context) (<-chan redislock.Released, error) {
	return b.redis.SubscribeReleases(ctx)
}
