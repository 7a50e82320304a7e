package redislock

import (
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// MinTTL is the shortest lease Acquire accepts: Redis expires keys with millisecond precision.
	MinTTL = time.Millisecond

	maxKeyLen = 1024
)

// RedisKey returns the Redis key that holds the lock named key.
func (c *Client) RedisKey(key string) string { return c.prefix + "{" + key + "}" }

// keys lists the Redis keys of one lock in the order every script receives them: lock, meta, fence,
// then, for a lock used with a queue, queue, waiters and tickets (see queue.lua). They share
// the hash tag {key}, so a Redis Cluster keeps them in one slot and a script may touch all of them.
// Scripts get sub-slices (lockMeta, withFence, withQueue), so no call builds a key list
// again.
type keys []string

// keySuffixes name a lock's keys after the lock key itself, in keys order.
const (
	metaSuffix    = ":meta"
	fenceSuffix   = ":fence"
	permitsSuffix = ":permits"
)

// releaseMarkInfix separates a release mark's key from its lock's (releasemark.lua).
const releaseMarkInfix = ":released:"

var (
	keySuffixes        = []string{metaSuffix, fenceSuffix}
	queuedKeySuffixes  = []string{metaSuffix, fenceSuffix, ":queue", ":waiters", ":tickets"}
	permitsKeySuffixes = []string{metaSuffix, fenceSuffix, ":queue", ":waiters", ":tickets", permitsSuffix}
)

// permitsKeyCount is how many keys a semaphore's scripts receive: the queued keys, then :permits.
// Only keysForPermits makes keys this long, which is how undoCall tells a semaphore.
const permitsKeyCount = 7

// keysFor runs on every Acquire, so it builds all keys in one string: each key after the first is the
// lock key and its suffix, and the lock key is the start of that string.
func (c *Client) keysFor(key string, queued bool) keys {
	suffixes := keySuffixes
	if queued {
		suffixes = queuedKeySuffixes
	}
	return c.keysWith(key, suffixes)
}

// keysForPermits returns the keys of a semaphore (a lock acquired WithPermits): slot 0's lock, meta
// and fence, the queue's three keys, then :permits. The other slots' keys are derived from the
// first by the scripts (slots.lua) and by slot.
func (c *Client) keysForPermits(key string) keys { return c.keysWith(key, permitsKeySuffixes) }

func (c *Client) keysWith(key string, suffixes []string) keys {
	baseLen := len(c.prefix) + len(key) + len("{}")
	size := 0
	for _, s := range suffixes {
		size += baseLen + len(s)
	}
	var b strings.Builder
	b.Grow(size)
	for _, s := range suffixes {
		b.WriteString(c.prefix)
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteByte('}')
		b.WriteString(s)
	}
	all := b.String()
	k := make(keys, 1+len(suffixes))
	k[0] = all[:baseLen]
	at := 0
	for i, s := range suffixes {
		k[i+1] = all[at : at+baseLen+len(s)]
		at += baseLen + len(s)
	}
	return k
}

func (k keys) lock() string { return k[0] }

// IsReleaseMark reports whether key, a Redis key of this library's, is a release mark: what a
// release leaves for a retention (WithReleaseMarkRetention), so a holder that asks again can tell
// its own release from a lease that ran out. Like a lock's fence counter, it outlives the lock's
// holders and waiters by design; it expires by itself.
func IsReleaseMark(key string) bool {
	_, suffix, _ := strings.Cut(key, "}")
	return strings.Contains(suffix, releaseMarkInfix)
}

// slot returns the keys of slot i of the semaphore whose keys (keysForPermits) are k: its lock, meta
// and fence keys (see slots.lua), then the shared queue and permits keys, then slot 0's lock key.
// Slot 0 is k itself. A Lock holds them, so Renew and TTL find the slot's keys first, and
// semaphore finds the rest.
func (k keys) slot(i int) keys {
	if i == 0 {
		return k
	}
	lock := k[0] + ":s" + strconv.Itoa(i)
	return append(keys{lock, lock + metaSuffix, lock + fenceSuffix}, append(k[3:permitsKeyCount:permitsKeyCount], k[0])...)
}

// semaphore returns the keys of the whole semaphore (keysForPermits) from a slot's keys (slot), or
// nil for a plain lock's keys.
func (k keys) semaphore() keys {
	switch len(k) {
	case permitsKeyCount:
		return k
	case permitsKeyCount + 1:
		lock := k[permitsKeyCount]
		return keys{lock, lock + metaSuffix, lock + fenceSuffix, k[3], k[4], k[5], k[6]}
	}
	return nil
}

// undoCall is the script and keys that undo a failed attempt's fresh grant on the lock whose keys
// are k: the lock itself, or, for a semaphore, whichever slot the attempt was granted.
func (k keys) undoCall() (*redis.Script, []string) {
	if len(k) == permitsKeyCount {
		return scriptUndoSlots, k[:1]
	}
	return scriptUndo, k.lockMeta()
}

// lockMeta is what renew, a release without a handoff and an undo touch.
func (k keys) lockMeta() []string { return k[:2] }

// withFence is what acquire (without a queue), fence and inspect touch.
func (k keys) withFence() []string { return k[:3] }

// withQueue is what a queued acquire, a handoff and dequeue touch. The keys must come from
// keysFor(key, true).
func (k keys) withQueue() []string { return k[:6] }

// queueWaiters is what KeepQueued touches: the queue and the waiters' deadlines.
func (k keys) queueWaiters() []string { return k[3:5] }

// queueOnly is what Lineup reads.
func (k keys) queueOnly() []string { return k[3:4] }

func validateKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty lock key")
	case len(key) > maxKeyLen:
		return invalidf("lock key is %d bytes; at most %d", len(key), maxKeyLen)
	case strings.ContainsAny(key, "{}"):
		// A brace would change the hash tag, and the lock's keys could land in different slots.
		return invalidf("lock key %q must not contain { or }", key)
	case strings.ContainsRune(key, 0):
		// NUL separates the fields of a handoff message (see queue.lua).
		return invalidf("lock key %q must not contain a NUL byte", key)
	}
	return nil
}

// validateToken refuses a token that could not be told from a grant mark: a fresh grant stores the
// token, a NUL byte and its attempt's id, and everything before the first NUL counts as the holder's
// token (see holder.lua). Generated and derived tokens are base64url.
func validateToken(token string) error {
	if strings.ContainsRune(token, 0) {
		return invalidf("token must not contain a NUL byte")
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return invalidf("ttl %v: must be at least %v", ttl, MinTTL)
	}
	return nil
}
