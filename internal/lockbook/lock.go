package lockbook

import (
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// Lock is a lock the book holds, as a reconciler sees it: which lock, which slot, which fence. It
// is no way to Redis: renewing and releasing are the book's (Track, Release, Untrack), so a
// reconciler cannot end a lease the book still renews, nor renew one the book gave up. Like the
// library's, its methods are safe on a nil *Lock.
type Lock struct{ l *redislock.Lock }

// held wraps a lock the library granted; nil for nil.
func held(l *redislock.Lock) *Lock {
	if l == nil {
		return nil
	}
	return &Lock{l: l}
}

// lib is the library's lock, or nil.
func (l *Lock) lib() *redislock.Lock {
	if l == nil {
		return nil
	}
	return l.l
}

// Key is the lock's name in the lock library (the claim's Key).
func (l *Lock) Key() string { return l.lib().Key() }

// Fence is the fencing token of this acquisition.
func (l *Lock) Fence() int64 { return l.lib().Fence() }

// Slot is the semaphore slot held (0 for a plain lock).
func (l *Lock) Slot() int { return l.lib().Slot() }

// Semaphore reports whether the lock is a slot of a semaphore.
func (l *Lock) Semaphore() bool { return l.lib().Semaphore() }

// Readopted reports whether the acquisition found the lock still held with the claim's token.
func (l *Lock) Readopted() bool { return l.lib().Readopted() }

// LeaseStart is when the current lease began, by the local clock.
func (l *Lock) LeaseStart() time.Time { return l.lib().LeaseStart() }
