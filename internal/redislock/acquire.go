package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// AcquireOption configures one Acquire call.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	token    string
	metadata string
	retry    RetryStrategy

	queueMember   string
	queueScore    float64
	queueLiveness time.Duration
	// permits is WithPermits' N; 0 without the option (a plain lock, today's scripts).
	permits int
	// diverted: a plain script found the lock to be a semaphore (see Acquire), so attempts run the
	// semaphore's script under its stored N (permits stays 0, which acquireslots.lua reads as
	// "keep it").
	diverted bool
	// attempt is this attempt's random id: the grant mark that lets a failed attempt undo only what
	// it created (undo.lua), and, queued, the id in the ticket a handoff honours.
	attempt string
}

// WithToken acquires with the given token instead of a random one. Acquiring a lock that is held
// with this very token succeeds and extends it: that is how a restarted process re-adopts the locks
// it held. The token is the lock's only credential: derive it from a secret, never from public data.
// It must not contain a NUL byte (Acquire refuses it).
func WithToken(token string) AcquireOption { return func(o *acquireOptions) { o.token = token } }

// WithMetadata stores m beside the lock for the lock's lifetime, for others to read with Inspect
// (e.g. who holds it). Default: empty.
func WithMetadata(m string) AcquireOption { return func(o *acquireOptions) { o.metadata = m } }

// WithRetry sets how Acquire retries while the lock is held by someone else. Default: NoRetry.
// Retries always end when the context does.
func WithRetry(s RetryStrategy) AcquireOption { return func(o *acquireOptions) { o.retry = s } }

// WithQueue makes the caller wait its turn: it joins the lock's queue as member with score, and a
// free lock goes only to the waiter at the head (lowest score, then lowest member). A waiter that has
// not asked again within liveness drops out of the queue, so a waiter that vanished cannot block
// it; call Dequeue when giving up. When not acquired, the error is a *QueuedError with the position.
//
// On a single deployment, releasing a lock that was acquired with a queue (and ReleaseToken) hands
// it straight to the live waiter at the head, with the token, lease and metadata of that waiter's
// last attempt, for the waiter's ttl but no longer than what is left of its liveness: the waiter
// finds it held with its own token at its next attempt (a re-adoption, see Lock.Readopted), which
// comes at once when the client was built WithReleaseNotifications and Acquire is waiting with
// retries: the release message wakes it up, and the attempt confirms the lock in Redis. Nobody can
// slip in between holders. Without WithToken, a queued waiter's token is derived from member
// and a secret of the Client, so the next Acquire of member through the same Client claims what was
// handed to an earlier one; member therefore names one waiter, not a group.
func WithQueue(member string, score float64, liveness time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.queueMember, o.queueScore, o.queueLiveness = member, score, liveness }
}

// MaxPermits is the most holders WithPermits admits at once (and the number of slots the scripts
// look at, see slots.lua).
const MaxPermits = 64

// WithPermits acquires a slot of a semaphore of n permits (1..MaxPermits): up to n holders at once,
// each in its own slot (Lock.Slot) with its own fencing tokens, strictly increasing within the
// slot. Slot 0 is the plain lock's keys. How many the lock admits is what SetPermits stored, the
// semaphore's one writer (absent: 1); n only lowers it for this call (a free slot is granted while
// fewer than the lower of the two are held) and is never stored, so a caller that read a stale or
// deleted declaration cannot write back a number nobody declares any more. After the stored n is
// lowered, holders keep their slots and nobody acquires until fewer than the new n are held; after
// it is raised, the next acquisitions get the new slots. Once n is stored the lock stays a
// semaphore for every caller: an Acquire without the option finds that out in its first script,
// which changes nothing, and acquires a slot under the stored n with one more script call (its
// Lock is the slot's: see Lock.Semaphore); ReleaseToken, Dequeue and the Release of a plain lock
// acquired WithQueue likewise release slot 0, or dequeue, as the semaphore's scripts do. With
// WithQueue, the free slots go to the first waiters in line; without it, a caller gets a free slot
// only when more slots are free than live waiters stand in the queue. On Redlock, n > 1 is refused
// (ErrInvalidArgument): each node would choose its slot on its own, and no slot might reach a
// majority; n = 1 is the plain lock there. Default: a plain lock.
func WithPermits(n int) AcquireOption { return func(o *acquireOptions) { o.permits = n } }

// Acquire acquires the lock named key for ttl. It returns ErrNotAcquired (possibly joined with the
// context's error) when someone else holds the lock, and other errors when Redis could not answer;
// errors.Is tells them apart. Transport errors are not retried here: a lock that Redis cannot grant
// now will not become safe by hammering it, and the caller knows better how long to wait.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	// Redis keeps leases in whole milliseconds: count the lease Redis keeps, never a longer one.
	ttl = ttl.Truncate(time.Millisecond)
	if err := validateTTL(ttl); err != nil {
		return nil, err
	}
	var o acquireOptions
	if err := c.applyAcquireOptions(&o, opts); err != nil {
		return nil, err
	}

	k := c.keysFor(key, o.queueMember != "")
	if o.permits > 0 {
		k = c.keysForPermits(key)
	}
	var (
		timer *time.Timer
		watch *releaseWatch
	)
	for attempt := 1; ; attempt++ {
		id, err := newAttemptID()
		if err != nil {
			return nil, err
		}
		o.attempt = id
		start := time.Now()
		l, err := c.attemptAcquire(ctx, start, key, k, ttl, &o)
		if errors.Is(err, errSemaphore) {
			// The plain script found a semaphore and changed nothing: this attempt, and every later
			// one, is the semaphore's. The lease still counts from the first script's start.
			o.diverted, k = true, c.keysForPermits(key)
			l, err = c.attemptAcquire(ctx, start, key, k, ttl, &o)
		}
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		}
		wait, again := o.retry.Backoff(attempt)
		if !again {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		if watch == nil && o.queueMember != "" && c.releases != nil && c.handsOff() {
			watch = c.releases.watch(k.lock(), o.queueMember)
			defer c.releases.unwatch(watch)
		}
		if err := c.awaitTurn(ctx, err, timer, watch, &o); err != nil {
			return nil, err
		}
	}
}

// applyAcquireOptions applies opts over the defaults, checks them, and settles the token: the
// caller's, the one derived from the queue member, or a random one.
func (c *Client) applyAcquireOptions(o *acquireOptions, opts []AcquireOption) error {
	*o = acquireOptions{retry: NoRetry()}
	for _, opt := range opts {
		opt(o)
	}
	if err := validateToken(o.token); err != nil {
		return err
	}
	if o.token == "" && o.queueMember != "" {
		o.token = c.memberToken(o.queueMember)
	}
	if o.token == "" {
		t, err := newToken()
		if err != nil {
			return err
		}
		o.token = t
	}
	if o.retry == nil {
		o.retry = NoRetry()
	}
	if err := c.settlePermits(o); err != nil {
		return err
	}
	if o.queueMember != "" {
		if o.queueLiveness < MinTTL {
			return invalidf("queue liveness %v: must be at least %v", o.queueLiveness, MinTTL)
		}
		if strings.ContainsRune(o.queueMember, 0) {
			return invalidf("queue member %q must not contain a NUL byte", o.queueMember)
		}
	}
	return nil
}

// settlePermits checks WithPermits' n: a semaphore needs one deployment (see WithPermits), where
// n = 1 is the plain lock.
func (c *Client) settlePermits(o *acquireOptions) error {
	switch {
	case o.permits == 0:
		return nil
	case o.permits < 1 || o.permits > MaxPermits:
		return invalidf("permits %d: must be 1..%d", o.permits, MaxPermits)
	case !c.handsOff() && o.permits > 1:
		return invalidf("permits %d: Redlock nodes would choose slots on their own; a semaphore needs one deployment", o.permits)
	case !c.handsOff():
		o.permits = 0
	}
	return nil
}

// awaitTurn waits for the next attempt after notAcquired: until the backoff timer fires, or a
// release frees the lock while we are next in line or hands it to our latest attempt. A release
// message is only a wake-up: anyone who can publish on the channel can send one, so the next attempt
// asks Redis, which re-adopts a lock handed to us and returns its true fence. It returns an error
// only when ctx ends. watch is nil when there is no release channel to listen to.
func (c *Client) awaitTurn(ctx context.Context, notAcquired error, timer *time.Timer, watch *releaseWatch, o *acquireOptions) error {
	var releases <-chan release
	if watch != nil {
		releases = watch.ch
	}
	position := 0
	if qe, ok := errors.AsType[*QueuedError](notAcquired); ok {
		position = qe.Position
	}
	for {
		select {
		case <-ctx.Done():
			return errors.Join(notAcquired, ctx.Err())
		case <-timer.C:
			return nil
		case r := <-releases:
			switch {
			case !r.handedOff && position == 1:
				return nil // freed by a holder that does not hand off: we are next
			case r.handedOff && r.attempt == o.attempt:
				return nil // handed to us, says the message: claim it
			}
			// Not ours, or a handoff to an earlier attempt: the next attempt will tell.
		}
	}
}

// attemptAcquire makes one acquisition attempt on every node; the lease is counted from start.
func (c *Client) attemptAcquire(ctx context.Context, start time.Time, key string, k keys, ttl time.Duration, o *acquireOptions) (*Lock, error) {
	ttlMs := ttl.Milliseconds()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		if o.semaphore() {
			var liveness int64
			if o.queueMember != "" {
				liveness = o.queueLiveness.Milliseconds()
			}
			return c.runAcquire(ctx, n, scriptAcquireSlots, k, k,
				o.token, ttlMs, o.metadata, o.attempt, o.queueMember, o.queueScore, liveness, o.permits)
		}
		if o.queueMember != "" {
			return c.runAcquire(ctx, n, scriptAcquireQueued, k, k.withQueue(),
				o.token, ttlMs, o.metadata, o.attempt, o.queueMember, o.queueScore, o.queueLiveness.Milliseconds())
		}
		return c.runAcquire(ctx, n, scriptAcquire, k, k.withFence(), o.token, ttlMs, o.metadata, o.attempt)
	})

	// fresh are the nodes that granted the lock to this attempt, readopted those where it already
	// held our token. unsure are the nodes that did not answer: they may still apply the acquisition
	// late, so a failed attempt undoes there too (a node that answered "busy" cannot hold our token).
	var fresh, readopted, unsure []int
	var freshFence, readoptedFence int64
	slot := 0 // a semaphore's: only on one deployment, so one node answers
	busy, position, holder := 0, 0, ""
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
			if isTimeout(r.err) {
				unsure = append(unsure, i)
			}
			continue
		}
		if isSemaphoreReply(r.val) {
			if c.handsOff() {
				return nil, errSemaphore // one node, whose script wrote nothing: nothing to undo
			}
			errs = append(errs, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: errRedlockSemaphore})
			continue
		}
		g, err := acquireReply(r.val)
		if err != nil {
			errs = append(errs, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: err})
			continue
		}
		if g.ok {
			slot = g.slot
		}
		switch {
		case !g.ok:
			busy++
			position = max(position, g.position)
			if g.holder != "" {
				holder = g.holder
			}
		case g.readopted:
			readopted = append(readopted, i)
			readoptedFence = max(readoptedFence, g.fence)
		default:
			fresh = append(fresh, i)
			freshFence = max(freshFence, g.fence)
		}
	}

	// Only what this attempt created is undone: a re-adopted lock was held before and stays held.
	undo := func() {
		c.undoQuietly(ctx, k, o.token, o.attempt, fresh)
		c.releaseLate(k, o.token, o.attempt, unsure, ttl)
	}
	granted := len(fresh) + len(readopted)
	if granted < c.quorum {
		undo()
		if granted+busy >= c.quorum || (busy > 0 && len(errs) == 0) {
			if o.queueMember != "" {
				return nil, &QueuedError{Position: max(position, 1), Holder: holder}
			}
			return nil, ErrNotAcquired
		}
		return nil, c.unavailable(granted+busy, errs)
	}

	fence, isReadoption, err := c.settleFence(ctx, k, o.token, fresh, readopted, freshFence, readoptedFence)
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
	l := &Lock{client: c, key: key, keys: k, token: o.token, metadata: o.metadata, fence: fence,
		queued: o.queueMember != "" && c.handsOff(), readopted: isReadoption,
		ttl: ttl, leaseStart: start, validUntil: validUntil}
	if o.semaphore() {
		l.keys, l.slot = k.slot(slot), uint8(slot)
	}
	return l, nil
}

// semaphore reports whether an attempt runs the semaphore's script: WithPermits, or diverted.
func (o *acquireOptions) semaphore() bool { return o.permits > 0 || o.diverted }

// settleFence decides the fencing token of a quorum grant and whether it is a re-adoption.
// A re-adoption needs a quorum of nodes that still held our token: they all store the fence of the
// acquisition being re-adopted, so it keeps that fence, and nodes that granted afresh (one that lost
// its data) are raised to it and keep the lock. With fewer, it is a fresh acquisition: the highest
// token among the granting nodes, written back to them so every later quorum hands out a higher one.
func (c *Client) settleFence(ctx context.Context, k keys, token string, fresh, readopted []int, freshFence, readoptedFence int64) (fence int64, isReadoption bool, err error) {
	if len(readopted) >= c.quorum {
		if len(fresh) > 0 {
			// Best effort: the re-adopting quorum already holds the fence, and the fresh nodes'
			// counters (started from their clocks) are normally above it anyway.
			_ = c.raiseFence(ctx, k, token, readoptedFence, fresh, len(fresh))
		}
		return readoptedFence, true, nil
	}
	fence = max(freshFence, readoptedFence)
	if len(c.nodes) == 1 {
		return fence, false, nil
	}
	granted := append(slices.Clone(fresh), readopted...)
	if err := c.raiseFence(ctx, k, token, fence, granted, c.quorum); err != nil {
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

// grant is one node's answer to an acquisition attempt (acquire.lua, acquirequeued.lua).
type grant struct {
	ok        bool
	fence     int64
	readopted bool   // ok, and the lock already held our token
	slot      int    // ok: the semaphore's slot (acquireslots.lua); 0 for a plain lock
	position  int    // not ok: place in the queue (0 without one)
	holder    string // not ok: the holder's metadata
}

// acquireReply parses the acquire scripts' reply: {1, fence, readopted[, slot]} when acquired,
// {0, position[, holder]} when not.
func acquireReply(v any) (grant, error) {
	vals, isSlice := v.([]any)
	if !isSlice || len(vals) < 2 || len(vals) > 4 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	flag, ok1 := vals[0].(int64)
	n, ok2 := vals[1].(int64)
	if !ok1 || !ok2 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	if flag == 1 {
		g := grant{ok: true, fence: n}
		if len(vals) >= 3 {
			readopted, _ := vals[2].(int64)
			g.readopted = readopted == 1
		}
		if len(vals) == 4 {
			slot, _ := vals[3].(int64)
			g.slot = int(slot)
		}
		return g, nil
	}
	var holder string
	if len(vals) == 3 {
		holder, _ = vals[2].(string)
	}
	return grant{position: int(n), holder: holder}, nil
}
