package redislock

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Lock states. A Lock starts held and ends released or lost; it never goes back.
const (
	stateHeld int32 = iota
	stateReleased
	stateLost
)

// Lock is a lock this process acquired. Its methods are safe for concurrent use and safe on a nil
// *Lock (they return ErrNotHeld).
type Lock struct {
	client   *Client
	key      string
	keys     keys
	token    string
	tokenArg any // token boxed as a script argument (acquireOptions.tokenArg)
	metadata string
	fence    int64
	// queued: acquired WithQueue on a single deployment, so releasing it hands it to the next waiter.
	queued bool
	// readopted: the Acquire found the lock already held with its token (see Readopted).
	readopted bool
	// slot is the semaphore slot of a lock acquired WithPermits (whose keys, see keys.slot, are its
	// slot's and tell it from a plain lock). A byte beside the two bools, where the struct had
	// padding: a plain Lock keeps its size class (BenchmarkUncontended allocates one per Acquire).
	slot uint8

	state atomic.Int32

	mu         sync.Mutex
	ttl        time.Duration
	leaseStart time.Time
	validUntil time.Time
}

// tokenArgument is the token as a script argument: the one Acquire boxed, or, for a Lock made from
// a bare token (ReleaseToken), the token boxed now.
func (l *Lock) tokenArgument() any {
	if l.tokenArg != nil {
		return l.tokenArg
	}
	return l.token
}

// Key returns the lock's name as given to Acquire.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// RedisKey returns the Redis key that holds the lock.
func (l *Lock) RedisKey() string {
	if l == nil {
		return ""
	}
	return l.keys.lock()
}

// Token returns the lock's token. It is the lock's credential: do not log it.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// HolderToken returns the holder's token from the value of a lock's Redis key (see RedisKey) as
// read with GET, for tools and tests that look at Redis directly: a fresh grant stores the token, a
// NUL byte and the id of the attempt that made it; a re-adoption or a handoff the bare token.
func HolderToken(value string) string {
	token, _, _ := strings.Cut(value, "\x00")
	return token
}

// Readopted reports whether Acquire found the lock already held with this token, instead of
// granting it afresh: a restarted holder re-adopting its lock, a retry after an attempt that Redis
// applied late, or a lock a release handed to this waiter. The fence is then the one handed out
// when the lock was acquired afresh.
func (l *Lock) Readopted() bool {
	if l == nil {
		return false
	}
	return l.readopted
}

// Slot returns the semaphore slot this lock holds (0..n-1; see WithPermits); 0 for a plain lock.
// The fence orders this holder against the earlier holders of the same slot only.
func (l *Lock) Slot() int {
	if l == nil {
		return 0
	}
	return int(l.slot)
}

// Semaphore reports whether the lock was acquired as a semaphore (see WithPermits): its holder
// records Slot beside the fence, and a process without the *Lock releases it with
// ReleaseSlotToken.
func (l *Lock) Semaphore() bool { return l != nil && l.keys.semaphore() != nil }

// Fence returns the fencing token of this acquisition.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Metadata returns the metadata stored with the lock.
func (l *Lock) Metadata() string {
	if l == nil {
		return ""
	}
	return l.metadata
}

// LeaseTTL returns the lease length of the last successful acquire or renew.
func (l *Lock) LeaseTTL() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// LeaseStart returns when the last successful acquire or renew was sent: the lease runs from there.
func (l *Lock) LeaseStart() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseStart
}

// ValidUntil returns the instant until which the holder may rely on the lock: the start of the last
// successful acquire or renew plus its lease, minus the drift allowance. Past it, assume the lock
// is gone. The zero time means the lock is not held.
func (l *Lock) ValidUntil() time.Time {
	if l == nil || l.state.Load() != stateHeld {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Held reports whether the lock is still believed held: not released, not found lost, and within
// its validity.
func (l *Lock) Held() bool {
	if l == nil || l.state.Load() != stateHeld {
		return false
	}
	return time.Now().Before(l.ValidUntil())
}

func (l *Lock) markLost() { l.state.CompareAndSwap(stateHeld, stateLost) }

// lease reads the lock's lease length and validity under one lock of its mutex. The validity is
// zero once the lock is no longer held, as with ValidUntil.
func (l *Lock) lease() (time.Duration, time.Time) {
	held := l.state.Load() == stateHeld
	l.mu.Lock()
	defer l.mu.Unlock()
	if !held {
		return l.ttl, time.Time{}
	}
	return l.ttl, l.validUntil
}
