package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// attemptAcquire makes one acquisition attempt on every node; the lease is counted from start.
func (c *Client) attemptAcquire(ctx context.Context, start time.Time, key string, k keys, ttl time.Duration, o *acquireOptions) (*Lock, error) {
	var buf oneReply
	if !c.handsOff() {
		c.lead.propose(o)
	}
	replies := c.sendAcquire(ctx, k, ttl, o, buf[:])

	// fresh are the nodes that granted the lock to this attempt, readopted those where it already
	// held our token. unsure are the nodes that did not answer: they may still apply the acquisition
	// late, so a failed attempt undoes there too (a node that answered "busy" cannot hold our token).
	// They, and errs, are filled here rather than by count: a slice a helper filled or returned would
	// cost an allocation every Acquire, where these stay on the stack.
	var fresh, readopted, unsure []int
	var errs []error
	var t acquireTally
	for i, r := range replies {
		switch node, err := t.count(c, i, r); node {
		case nodeSemaphore:
			return nil, errSemaphore // one node, whose script wrote nothing: nothing to undo
		case nodeReleased:
			return nil, ErrReleasedBefore // one node (marks need one deployment), nothing written
		case nodeUnsure:
			unsure = append(unsure, i)
			errs = append(errs, err)
		case nodeFailed:
			errs = append(errs, err)
		case nodeReadopted:
			readopted = append(readopted, i)
		case nodeFresh:
			fresh = append(fresh, i)
		}
	}

	// Only what this attempt created is undone: a re-adopted lock was held before and stays held.
	undo := func() {
		c.undoQuietly(ctx, k, o.token, o.attempt, fresh)
		c.releaseLate(k, o.token, o.attempt, unsure, ttl)
	}
	if granted := len(fresh) + len(readopted); granted < c.quorum {
		undo()
		return nil, c.refusal(o, &t, granted, errs)
	}
	return c.settleGrant(ctx, start, key, k, ttl, o, &t, fresh, readopted, undo)
}

// sendAcquire runs the attempt's acquire script on every node: the semaphore's, the queue's or the
// plain lock's.
func (c *Client) sendAcquire(ctx context.Context, k keys, ttl time.Duration, o *acquireOptions, buf []nodeReply) []nodeReply {
	ttlMs := ttl.Milliseconds()
	return c.onNodesInto(ctx, nil, buf, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		if o.semaphore() {
			var liveness int64
			if o.queueMember != "" {
				liveness = o.queueLiveness.Milliseconds()
			}
			if o.recordedArg != nil {
				return c.runAcquire(ctx, n, scriptAcquireSlots, k, k,
					o.tokenArg, ttlMs, o.metadata, o.attempt, o.queueMember, o.queueScore, liveness, o.permits, joinArg(o.join), o.recordedArg, o.recordedSlot)
			}
			return c.runAcquire(ctx, n, scriptAcquireSlots, k, k,
				o.tokenArg, ttlMs, o.metadata, o.attempt, o.queueMember, o.queueScore, liveness, o.permits, joinArg(o.join))
		}
		if o.queueMember != "" {
			return c.runAcquire(ctx, n, scriptAcquireQueued, k, k.withQueue(),
				o.tokenArg, ttlMs, o.metadata, o.attempt, o.queueMember, o.queueScore, o.queueLiveness.Milliseconds(), joinArg(o.join), o.proposalArg)
		}
		if o.recordedArg != nil {
			// No proposal: marks, and so recordedArg, exist on one deployment only.
			return c.runAcquire(ctx, n, scriptAcquire, k, k.withFence(), o.tokenArg, ttlMs, o.metadata, o.attempt, "", o.recordedArg)
		}
		if o.proposalArg != nil {
			return c.runAcquire(ctx, n, scriptAcquire, k, k.withFence(), o.tokenArg, ttlMs, o.metadata, o.attempt, o.proposalArg)
		}
		return c.runAcquire(ctx, n, scriptAcquire, k, k.withFence(), o.tokenArg, ttlMs, o.metadata, o.attempt)
	})
}

// joinArg is the scripts' join-only argument.
func joinArg(join bool) string {
	if join {
		return "1"
	}
	return ""
}

// nodeOutcome is what one node's reply to an attempt makes of that node.
type nodeOutcome uint8

const (
	nodeFailed    nodeOutcome = iota // no answer that counts: an error, or a reply not understood
	nodeUnsure                       // failed by a timeout: the node may still apply the attempt late
	nodeBusy                         // held by another, or not this waiter's turn
	nodeReadopted                    // granted, and it already held our token
	nodeFresh                        // granted to this attempt
	nodeSemaphore                    // a single deployment's plain script found a semaphore
	nodeReleased                     // the release mark says our token released the recorded acquisition
)

// acquireTally is what an attempt's replies say, but for which nodes granted or failed (see
// attemptAcquire): the fences of the grants, how many granting nodes handed out the highest of them
// (each keeps the fence it answered as its counter), a semaphore's slot, and, for a refusal, how
// many nodes were busy, the place in the queue and the holder.
type acquireTally struct {
	freshFence, readoptedFence int64
	highest                    int64
	atHighest                  int
	slot                       int // a semaphore's: only on one deployment, so one node answers
	busy, position             int
	holder                     string
	free                       bool // joining: the lock is free and its next grant is this waiter's
}

// count reads node i's reply r into t and says what it makes of the node; err is why it failed.
func (t *acquireTally) count(c *Client, i int, r nodeReply) (nodeOutcome, error) {
	if r.err != nil {
		if isTimeout(r.err) {
			return nodeUnsure, r.err
		}
		return nodeFailed, r.err
	}
	if isSemaphoreReply(r.val) {
		if c.handsOff() {
			return nodeSemaphore, nil
		}
		return nodeFailed, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: errRedlockSemaphore}
	}
	g, err := acquireReply(r.val)
	if err != nil {
		return nodeFailed, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: err}
	}
	switch {
	case g.releasedBefore:
		return nodeReleased, nil
	case !g.ok:
		t.busy++
		t.position = max(t.position, g.position)
		if g.holder != "" {
			t.holder = g.holder
		}
		t.free = t.free || g.free
		return nodeBusy, nil
	case g.readopted:
		t.slot = g.slot
		t.readoptedFence = max(t.readoptedFence, g.fence)
		t.granted(g.fence)
		return nodeReadopted, nil
	default:
		t.slot = g.slot
		t.freshFence = max(t.freshFence, g.fence)
		t.granted(g.fence)
		return nodeFresh, nil
	}
}

// granted counts a granting node's fence towards the highest and how many nodes answered it.
func (t *acquireTally) granted(fence int64) {
	switch {
	case fence > t.highest:
		t.highest, t.atHighest = fence, 1
	case fence == t.highest:
		t.atHighest++
	}
}

// refusal is the error of an attempt that fewer than a quorum of nodes granted: not acquired (a
// *QueuedError with a queue) when the busy and granting nodes make a quorum, or every node answered
// and at least one was busy; else Redis unavailable, with the nodes' errors.
func (c *Client) refusal(o *acquireOptions, t *acquireTally, granted int, errs []error) error {
	if granted+t.busy >= c.quorum || (t.busy > 0 && len(errs) == 0) {
		if o.queueMember != "" {
			return &QueuedError{Position: max(t.position, 1), Holder: t.holder, Free: t.free}
		}
		return ErrNotAcquired
	}
	return c.unavailable(granted+t.busy, errs)
}

// settleGrant turns a quorum's grant into the held Lock: it settles the fencing token (settleFence)
// and checks that the lease outlived the attempt. When either fails, it undoes the attempt first.
func (c *Client) settleGrant(ctx context.Context, start time.Time, key string, k keys, ttl time.Duration, o *acquireOptions,
	t *acquireTally, fresh, readopted []int, undo func()) (*Lock, error) {
	fence, isReadoption, err := c.settleFence(ctx, k, o, t, fresh, readopted)
	if err != nil {
		undo()
		return nil, err
	}
	validUntil := c.validUntil(start, ttl)
	if !time.Now().Before(validUntil) {
		// The acquisition took longer than the lease (a slow node, a paused process): the lock may
		// already have expired somewhere, so it cannot be trusted.
		undo()
		return nil, fmt.Errorf("%w: lease of %v ran out while acquiring (%v)", ErrNotAcquired, ttl, time.Since(start))
	}
	l := &Lock{client: c, key: key, keys: k, token: o.token, tokenArg: o.tokenArg, metadata: o.metadata, fence: fence,
		queued: o.queueMember != "" && c.handsOff(), readopted: isReadoption,
		ttl: ttl, leaseStart: start, validUntil: validUntil}
	if o.semaphore() {
		l.keys, l.slot = k.slot(t.slot), uint8(t.slot)
	}
	return l, nil
}

// settleFence decides the fencing token of a quorum grant and whether it is a re-adoption.
// A re-adoption needs a quorum of nodes that still held our token: they all store the fence of the
// acquisition being re-adopted, so it keeps that fence, and nodes that granted afresh (one that lost
// its data) are raised to it and keep the lock. With fewer, it is a fresh acquisition: the highest
// token among the granting nodes. A quorum of nodes must keep it, so every later quorum hands out a
// higher one: when fewer than a quorum answered it (their counters are what they answered), it is
// written back to the granting nodes.
func (c *Client) settleFence(ctx context.Context, k keys, o *acquireOptions, t *acquireTally, fresh, readopted []int) (fence int64, isReadoption bool, err error) {
	if len(readopted) >= c.quorum {
		if len(fresh) > 0 {
			// Best effort: the re-adopting quorum already holds the fence, and the fresh nodes'
			// counters (started from their clocks) are normally above it anyway.
			_ = c.raiseFence(ctx, k, o.token, t.readoptedFence, fresh, len(fresh))
		}
		return t.readoptedFence, true, nil
	}
	fence = t.highest // of the fresh and re-adopted grants
	if len(c.nodes) == 1 {
		return fence, false, nil
	}
	c.lead.learn(o, fence)
	if t.atHighest >= c.quorum {
		return fence, false, nil // the nodes agreed on the proposal, or their counters did
	}
	granted := append(slices.Clone(fresh), readopted...)
	if err := c.raiseFence(ctx, k, o.token, fence, granted, c.quorum); err != nil {
		return 0, false, err
	}
	return fence, false, nil
}

// runAcquire runs an acquire script on one node and, with WithWaitReplicas, WAITs for replicas in
// the same pipeline: WAIT counts the writes of its own connection only, so it must share one.
// args are the script's: token, ttl, metadata, attempt id, then the queue's.
func (c *Client) runAcquire(ctx context.Context, n redis.UniversalClient, script *redis.Script, k keys, scriptKeys []string, args ...any) (any, error) {
	if c.waitReplicas <= 0 {
		return runScript(ctx, n, script, scriptKeys, args...).Result()
	}
	var cmds []redis.Cmder
	err := withScript(ctx, n, script, func() (err error) {
		cmds, err = n.Pipelined(ctx, func(p redis.Pipeliner) error {
			script.EvalSha(ctx, p, scriptKeys, args...)
			p.Do(ctx, "WAIT", c.waitReplicas, c.waitTimeout.Milliseconds())
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	val, _ := cmds[0].(*redis.Cmd).Result()
	acks, err := cmds[1].(*redis.Cmd).Int64()
	if err != nil {
		return nil, fmt.Errorf("wait for replicas: %w", err)
	}
	g, _ := acquireReply(val)
	if !g.ok || acks >= int64(c.waitReplicas) {
		return val, nil
	}
	if g.readopted {
		// The lock was ours before this attempt and still is: undoing it would remove it
		// from under a holder that may be running, for nothing. Report the risk, keep the lock.
		return nil, fmt.Errorf("only %d of %d replicas acknowledged the lock within %v (re-adopted: kept)", acks, c.waitReplicas, c.waitTimeout)
	}
	// Granted on the primary but not replicated in time: undo it, it would not survive a
	// failover.
	undo, undoKeys := k.undoCall()
	_ = runScript(context.WithoutCancel(ctx), n, undo, undoKeys, args[0], args[3]).Err()
	return nil, fmt.Errorf("only %d of %d replicas acknowledged the lock within %v", acks, c.waitReplicas, c.waitTimeout)
}

// raiseFence writes fence back to the given nodes (see fence.lua); at least need of them must still
// hold the lock.
func (c *Client) raiseFence(ctx context.Context, k keys, token string, fence int64, nodes []int, need int) error {
	replies := c.onNodes(ctx, nodes, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptFence, k.withFence(), token, strconv.FormatInt(fence, 10)).Result()
	})
	t := tallyInts(replies)
	if t.ok >= need {
		return nil
	}
	if len(t.errs) == 0 {
		return fmt.Errorf("%w: lost the lock on %d nodes while fencing", ErrNotAcquired, t.no)
	}
	return c.unavailable(t.ok, t.errs)
}

// undoQuietly undoes this attempt's fresh grants on the given nodes. It uses a context that survives
// the caller's cancellation, since leaving the keys behind would block others for a whole TTL.
func (c *Client) undoQuietly(ctx context.Context, k keys, token, attempt string, nodes []int) {
	if len(nodes) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.nodeTimeout, time.Second))
	defer cancel()
	c.onNodes(rctx, nodes, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		undo, undoKeys := k.undoCall()
		return runScript(ctx, n, undo, undoKeys, token, attempt).Result()
	})
}
