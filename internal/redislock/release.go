package redislock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Release deletes the lock if it is still ours and, with WithReleaseNotifications, tells waiters.
// A lock acquired WithQueue goes straight to the next waiter in its queue (see WithQueue).
// It returns ErrNotHeld if the lock had expired or was acquired by someone else in the meantime (their
// lock is left untouched), and other errors when Redis could not answer (call it again). On a single
// deployment, a call again after a release whose reply was lost finds the release's mark and
// returns nil (see WithReleaseMarkRetention).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil || l.state.Load() == stateReleased {
		return ErrNotHeld
	}
	c := l.client
	script, keys := scriptRelease, l.keys.lockMeta()
	if l.queued {
		script, keys = scriptReleaseHandoff, l.keys.withQueue()
	}
	fence := c.markFenceArg(l.fence)
	var buf oneReply
	replies := c.onNodesInto(ctx, nil, buf[:], func(ctx context.Context, n redis.UniversalClient) (any, error) {
		if sem := l.keys.semaphore(); sem != nil {
			return runScript(ctx, n, scriptReleaseSlot, sem, l.token, c.notify, l.slot, handsOffArg(l.queued), c.markRetention, fence).Result()
		}
		v, err := runScript(ctx, n, script, keys, l.tokenArgument(), c.notify, c.markRetention, fence).Result()
		if err != nil || !isSemaphoreReply(v) {
			return v, err
		}
		// releasehandoff.lua found that the lock became a semaphore while we held it (SetPermits, or
		// a holder WithPermits after ours) and changed nothing: release slot 0, which is what a plain
		// lock holds, as the semaphore's. Only a single deployment hands off, so this is its one node.
		return runScript(ctx, n, scriptReleaseSlot, c.keysForPermits(l.key), l.token, c.notify, 0, handsOffArg(true), c.markRetention, fence).Result()
	})
	t := tallyInts(replies)
	switch {
	case len(replies) == 1 && replies[0].err == nil && replies[0].val == int64(releasedBefore):
		l.state.Store(stateReleased)
		return nil
	case t.ok >= c.quorum || (t.ok > 0 && len(t.errs) == 0):
		// A node we could not reach keeps its copy until the TTL ends; a majority is gone, so
		// nobody is blocked by it.
		l.state.Store(stateReleased)
		return nil
	case len(t.errs) == 0:
		l.state.Store(stateReleased)
		return fmt.Errorf("release %s: %w", l.key, ErrNotHeld)
	default:
		return fmt.Errorf("release %s: %w", l.key, c.unavailable(t.ok+t.no, t.errs))
	}
}

// ReleaseToken deletes the lock named key if token holds it: Release for a process that knows its
// token but has no *Lock, such as an operator that restarted. On a single deployment it hands the
// lock to the head of its queue, as Release does for a lock acquired WithQueue; on a semaphore (see
// WithPermits) it is ReleaseSlotToken of slot 0, the slot a plain holder holds. It returns
// ErrNotHeld if token does not hold the lock (nothing is touched). fence is the fencing token the
// caller's acquisition got, 0 if it does not know it: on a single deployment, a lock that token
// released under fence before (within the release mark's retention, WithReleaseMarkRetention)
// answers nil, since the call finds its own release done, not a lease that ran out.
func (c *Client) ReleaseToken(ctx context.Context, key, token string, fence int64) error {
	if err := validateRelease(key, token); err != nil {
		return err
	}
	l := &Lock{client: c, key: key, keys: c.keysFor(key, c.handsOff()), token: token, fence: fence, queued: c.handsOff()}
	return l.Release(ctx)
}

// markFenceArg is the fence a release asks the release mark about, as a script argument: fence
// where marks are left (a single deployment), else 0, which matches no mark and, unlike a fence,
// costs no allocation to box.
func (c *Client) markFenceArg(fence int64) any {
	if c.markRetention == noMarks {
		return int64(0)
	}
	return fence
}

// releasedBefore is the release scripts' answer when the token had released the lock under the
// caller's fence already (releasemark.lua).
const releasedBefore = 2

// ReleaseSlotToken is ReleaseToken for slot of a lock acquired WithPermits: it deletes the slot if
// token holds it and hands a slot off to the head of the queue while fewer than the lock's permits
// are held (see WithPermits). A semaphore lives on one deployment, so on Redlock it is refused.
func (c *Client) ReleaseSlotToken(ctx context.Context, key string, slot int, token string, fence int64) error {
	if err := validateRelease(key, token); err != nil {
		return err
	}
	if err := c.validateSlots("release slot", slot+1); err != nil {
		return err
	}
	l := &Lock{client: c, key: key, keys: c.keysForPermits(key).slot(slot), slot: uint8(slot), token: token, fence: fence, queued: true}
	return l.Release(ctx)
}

func validateRelease(key, token string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if token == "" {
		return invalidf("empty token")
	}
	return validateToken(token)
}

// validateSlots refuses a semaphore call on Redlock and a slot count outside 1..MaxPermits.
func (c *Client) validateSlots(verb string, n int) error {
	if !c.handsOff() {
		return invalidf("%s: a semaphore needs one deployment, not Redlock", verb)
	}
	if n < 1 || n > MaxPermits {
		return invalidf("%s: %d slots; must be 1..%d", verb, n, MaxPermits)
	}
	return nil
}

// ReleasedBefore reports whether token released the lock named key (its slot, for a semaphore's
// holder; slot 0 otherwise) under fence, as the release mark it left says (WithReleaseMarkRetention):
// true means that acquisition is over, whoever holds the lock now. A holder that finds its lock
// free, or another's, when it asks again learns so whether it was its own release (another process
// of its, or an earlier pass whose record was lost) rather than a loss. Without marks (the
// default, and always on Redlock) or with fence 0 it reports false.
func (c *Client) ReleasedBefore(ctx context.Context, key string, slot int, token string, fence int64) (bool, error) {
	if err := validateRelease(key, token); err != nil {
		return false, err
	}
	if c.markRetention == noMarks || fence <= 0 {
		return false, nil
	}
	k := c.keysFor(key, false)
	if slot > 0 {
		k = c.keysForPermits(key).slot(slot)
	}
	got, err := runScript(ctx, c.nodes[0], scriptReleasedBefore, k[:1], token, strconv.FormatInt(fence, 10)).Int()
	if err != nil {
		return false, fmt.Errorf("read the release mark of %s: %w", key, err)
	}
	return got == 1, nil
}
