package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// semaphoreReply is the status a plain script (acquire.lua, acquirequeued.lua, releasehandoff.lua,
// dequeue.lua) answers, having changed nothing, when the lock is a semaphore: the caller runs the
// same call once more with the semaphore's script.
const semaphoreReply = "SEMAPHORE"

// errSemaphore is attemptAcquire's answer to a plain attempt that acquire.lua or acquirequeued.lua
// diverted: Acquire runs the attempt again as a semaphore's. It never reaches a caller.
var errSemaphore = errors.New("redislock: the lock is a semaphore")

// errRedlockSemaphore is a Redlock node's error when it answers semaphoreReply: nothing on Redlock
// writes a :permits key (WithPermits and SetPermits refuse n > 1 there), and a semaphore's slot
// chosen by each node on its own is not a lock, so the node's answer does not count.
var errRedlockSemaphore = errors.New("a Redlock node holds a semaphore's permits; its answer does not count")

func isSemaphoreReply(v any) bool {
	s, ok := v.(string)
	return ok && s == semaphoreReply
}

// SetPermits stores n as the permits of the lock named key without acquiring it. It is the one
// writer of a semaphore's n (acquisitions read it, see WithPermits): releases obey it at once (after n was lowered, they hand no slot off until
// fewer than n are held), and so does every Acquire without WithPermits. n = 1 on a lock that is no
// semaphore writes nothing: it would become one, and every later acquisition would pay for the
// semaphore's scripts to behave as the plain lock does; n = 1 on a semaphore whose slots above 0 are
// free makes it a plain lock again (its permits are deleted), and while one of them is held it is
// written, so the holder still counts. Raising n hands no free
// slot to a waiter by itself: a waiter gets one at its next Acquire, so whoever raises n wakes the
// waiters. n must be 1..MaxPermits; on Redlock, n > 1 is refused (ErrInvalidArgument, as
// WithPermits) and n = 1 does nothing.
func (c *Client) SetPermits(ctx context.Context, key string, n int) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if n == 1 && !c.handsOff() {
		return nil
	}
	if err := c.validateSlots("set permits", n); err != nil {
		return err
	}
	if err := runScript(ctx, c.nodes[0], scriptSetPermits, c.keysForPermits(key), n).Err(); err != nil {
		return fmt.Errorf("set permits %s: %w", key, &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	return nil
}

// Semaphores returns the names of the locks whose permits are stored (SetPermits), in no order: what
// the declarer of permits compares with what it declares, to find a stored n that nothing declares
// any more (its declaration was deleted while the declarer did not look). It scans the keyspace
// (SCAN, on every master of a Redis Cluster), so call it seldom. Redlock stores no permits: nil.
func (c *Client) Semaphores(ctx context.Context) ([]string, error) {
	if !c.handsOff() {
		return nil, nil
	}
	pattern := globEscape(c.prefix) + "{*}" + permitsSuffix
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if name, ok := c.semaphoreName(iter.Val()); ok {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.nodes[0].(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, c.nodes[0])
	}
	if err != nil {
		return nil, fmt.Errorf("list semaphores: %w", &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	return names, nil
}

// semaphoreName returns the lock name of a permits key, RedisKey(name) + ":permits".
func (c *Client) semaphoreName(redisKey string) (string, bool) {
	rest, ok := strings.CutPrefix(redisKey, c.prefix+"{")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "}"+permitsSuffix)
	if !ok || validateKey(name) != nil {
		return "", false
	}
	return name, true
}

// globEscape quotes the characters SCAN's MATCH pattern treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
