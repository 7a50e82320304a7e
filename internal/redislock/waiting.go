package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The verbs of a waiter that does not ask for the lock again while it waits: its process keeps it
// queued (KeepQueued) and learns its place from whoever watches the releases (Lineup). Asking again
// (Acquire WithQueue) costs a script per waiter; these cost one call per lock, however long the queue.

// Join stands the waiter of WithQueue in the queue of the lock named key, as an Acquire attempt
// that found the lock held would, but takes nothing, not even a free lock: it writes the waiter's
// place, liveness and ticket (its token, ttl and metadata from opts), so a release hands the lock
// straight to it when its turn comes. A caller that must do some work before it may hold a lock
// (store what lets it release one) stands in line first and does that work later, not ahead of the
// waiters behind it. The answer is a *QueuedError (ErrNotAcquired); its Free reports a lock, or a
// semaphore's slot, that is free and whose next grant is this waiter's, or that already holds the
// waiter's token: nobody hands over a lock nobody releases, so the caller must Acquire it. Only a
// single deployment hands a lock over (see WithQueue): on Redlock, Join is refused.
func (c *Client) Join(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) error {
	if !c.handsOff() {
		return invalidf("join %s: only a single deployment hands a lock to a waiter; Redlock does not", key)
	}
	var o acquireOptions
	ttl, k, err := c.prepareAcquire(key, ttl, &o, opts)
	if err != nil {
		return err
	}
	if o.queueMember == "" {
		return invalidf("join %s: no queue member (WithQueue)", key)
	}
	o.join = true
	l, err := c.attemptOnce(ctx, key, &k, ttl, &o)
	switch {
	case errors.Is(err, ErrNotAcquired):
		return err
	case err != nil:
		return fmt.Errorf("join %s: %w", key, withContextErr(ctx, err))
	default:
		// The scripts never grant while joining; should one, the lock must not stay behind.
		_ = l.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("join %s: granted a lock while joining", key)
	}
}

// KeepQueued pushes back, to liveness from now, the deadline of each member that still stands in
// the queue of the lock named key (see WithQueue), as if each had asked again, and returns the
// members that do not stand in it: they left, were handed the lock, or dropped out because nobody
// kept them in time. Only Acquire puts a member back. On Redlock a member counts as gone when any
// node lost it, since a node without it would hand its majority vote to someone behind.
func (c *Client) KeepQueued(ctx context.Context, key string, liveness time.Duration, members ...string) (gone []string, err error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if liveness < MinTTL {
		return nil, invalidf("queue liveness %v: must be at least %v", liveness, MinTTL)
	}
	if len(members) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 1+len(members))
	args = append(args, liveness.Milliseconds())
	for _, m := range members {
		args = append(args, m)
	}
	k := c.keysFor(key, true).queueWaiters()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptKeepQueued, k, args...).StringSlice()
	})
	seen := map[string]bool{}
	failed := 0
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			failed++
			errs = append(errs, r.err)
			continue
		}
		for _, m := range r.val.([]string) {
			if !seen[m] {
				seen[m] = true
				gone = append(gone, m)
			}
		}
	}
	if failed > len(c.nodes)-c.quorum {
		return gone, fmt.Errorf("keep queued %s: %w", key, c.unavailable(len(replies)-failed, errs))
	}
	return gone, nil
}

// Lineup returns the members standing at the given positions of the queue of the lock named key
// (1 is the head; ascending), in one call: after a handoff, the waiters whose place changed learn it
// without asking Redis each. The answer stops before the first position past the end of the queue.
// Positions count as Acquire's QueuedError does. Only a single deployment keeps one queue (see
// HandsOff); on Redlock, Lineup is refused.
func (c *Client) Lineup(ctx context.Context, key string, positions ...int) ([]string, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if !c.handsOff() {
		return nil, invalidf("lineup: Redlock nodes keep separate queues")
	}
	args := make([]any, 0, len(positions))
	last := 0
	for _, p := range positions {
		if p <= last {
			return nil, invalidf("lineup: positions must ascend from 1, got %v", positions)
		}
		last = p
		args = append(args, p)
	}
	if len(args) == 0 {
		return nil, nil
	}
	members, err := runScript(ctx, c.nodes[0], scriptLineup, c.keysFor(key, true).queueOnly(), args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("lineup %s: %w", key, &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	return members, nil
}

// Dequeue removes member from the queue of the lock named key (see WithQueue): member no longer
// wants the lock. If a release handed member the lock in the meantime, Dequeue releases it and
// hands it off to the next waiter, unless member already claimed it with another attempt (as a waiting Acquire does when
// a release wakes it up); do not Dequeue a member that holds its lock. On a single deployment, a
// lock that is free (its lease ran out) while others wait is handed to the new head as well. On a
// semaphore (see WithPermits) it is DequeueSlots. Removing a member that is not queued is not an
// error.
func (c *Client) Dequeue(ctx context.Context, key, member string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	keys := c.keysFor(key, true).withQueue()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		v, err := runScript(ctx, n, scriptDequeue, keys, member, c.notify, handsOffArg(c.handsOff())).Result()
		switch {
		case err != nil || !isSemaphoreReply(v):
			return v, err
		case !c.handsOff():
			return nil, errRedlockSemaphore
		}
		// The lock is a semaphore, and dequeue.lua changed nothing: member may hold any slot.
		return runScript(ctx, n, scriptDequeueSlots, c.keysForPermits(key), member, c.notify).Result()
	})
	if t := tallyInts(replies); len(t.errs) > len(c.nodes)-c.quorum {
		return fmt.Errorf("dequeue %s: %w", key, c.unavailable(len(replies)-len(t.errs), t.errs))
	}
	return nil
}

// DequeueSlots is Dequeue for a lock acquired WithPermits: it removes member from the queue and, if
// a release handed member a slot in the meantime, releases that slot and hands a slot on (see
// ReleaseSlotToken); a slot that is free while others wait and fewer than the permits are held goes
// to the new head as well. A semaphore lives on one deployment, so on Redlock it is refused.
func (c *Client) DequeueSlots(ctx context.Context, key, member string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := c.validateSlots("dequeue slots", 1); err != nil {
		return err
	}
	if err := runScript(ctx, c.nodes[0], scriptDequeueSlots, c.keysForPermits(key), member, c.notify).Err(); err != nil {
		return fmt.Errorf("dequeue slots %s: %w", key, &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	return nil
}

func handsOffArg(on bool) string {
	if on {
		return "1"
	}
	return "0"
}
