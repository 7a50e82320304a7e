package redislock

import (
	"context"
	"errors"
	"fmt"
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

// SetPermits stores n as the permits of the lock named key without acquiring it, as an acquisition
// WithPermits(n) would: releases obey it at once (after n was lowered, they hand no slot off until
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
