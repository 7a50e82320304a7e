package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// tokenBytes is the entropy of a generated token: 128 bits cannot be guessed or collide.
const tokenBytes = 16

// attemptBytes is the entropy of an attempt id: 96 bits, so nobody can guess the id of a waiter's
// attempt to forge its handoff, and two attempts never share a grant mark.
const attemptBytes = 12

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
	metadata string
	fence    int64
	// queued: acquired WithQueue on a single deployment, so releasing it hands it to the next waiter.
	queued bool
	// readopted: the Acquire found the lock already held with its token (see Readopted).
	readopted bool

	state atomic.Int32

	mu         sync.Mutex
	ttl        time.Duration
	leaseStart time.Time
	validUntil time.Time
}

// AcquireOption configures one Acquire call.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	token    string
	metadata string
	retry    RetryStrategy

	queueMember   string
	queueScore    float64
	queueLiveness time.Duration
	// attempt is this attempt's random id: the grant mark that lets a failed attempt undo only what
	// it created (undo.lua), and, queued, the id in the ticket a handoff grants.
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
	o := acquireOptions{retry: NoRetry()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := validateToken(o.token); err != nil {
		return nil, err
	}
	if o.token == "" && o.queueMember != "" {
		o.token = c.memberToken(o.queueMember)
	}
	if o.token == "" {
		t, err := newToken()
		if err != nil {
			return nil, err
		}
		o.token = t
	}
	if o.retry == nil {
		o.retry = NoRetry()
	}
	if o.queueMember != "" {
		if o.queueLiveness < MinTTL {
			return nil, invalidf("queue liveness %v: must be at least %v", o.queueLiveness, MinTTL)
		}
		if strings.ContainsRune(o.queueMember, 0) {
			return nil, invalidf("queue member %q must not contain a NUL byte", o.queueMember)
		}
	}

	k := c.keysFor(key, o.queueMember != "")
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
		start := c.now()
		l, err := c.attemptAcquire(ctx, start, key, k, ttl, &o)
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
		if watch == nil && o.queueMember != "" && c.releases != nil {
			watch = c.releases.watch(k.lock(), o.queueMember)
			defer c.releases.unwatch(watch)
		}
		if err := c.awaitTurn(ctx, err, timer, watch, &o); err != nil {
			return nil, err
		}
	}
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
		g, err := acquireReply(r.val)
		if err != nil {
			errs = append(errs, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: err})
			continue
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
	if !c.now().Before(validUntil) {
		// The acquisition took longer than the lease (a slow node, a paused process): the lock may
		// already have expired somewhere, so it cannot be trusted.
		undo()
		return nil, fmt.Errorf("%w: lease of %v ran out while acquiring (%v)", ErrNotAcquired, ttl, c.now().Sub(start))
	}
	l := &Lock{client: c, key: key, keys: k, token: o.token, metadata: o.metadata, fence: fence,
		queued: o.queueMember != "" && c.handsOff(), readopted: isReadoption,
		ttl: ttl, leaseStart: start, validUntil: validUntil}
	return l, nil
}

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
		return script.Run(ctx, n, scriptKeys, args...).Result()
	}
	for attempt := 0; ; attempt++ {
		cmds, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
			script.EvalSha(ctx, p, scriptKeys, args...)
			p.Do(ctx, "WAIT", c.waitReplicas, c.waitTimeout.Milliseconds())
			return nil
		})
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if err := script.Load(ctx, n).Err(); err != nil {
				return nil, err
			}
			continue
		}
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
			// The lock was ours before this attempt and still is: giving it back would take it
			// from a holder that may be running, for nothing. Report the risk, keep the lock.
			return nil, fmt.Errorf("only %d of %d replicas acknowledged the lock within %v (re-adopted: kept)", acks, c.waitReplicas, c.waitTimeout)
		}
		// Granted on the primary but not replicated in time: give it back, it would not survive a
		// failover.
		_ = scriptUndo.Run(context.WithoutCancel(ctx), n, k.lockMeta(), args[0], args[3]).Err()
		return nil, fmt.Errorf("only %d of %d replicas acknowledged the lock within %v", acks, c.waitReplicas, c.waitTimeout)
	}
}

// raiseFence writes fence back to the given nodes (see fence.lua); at least need of them must still
// hold the lock.
func (c *Client) raiseFence(ctx context.Context, k keys, token string, fence int64, nodes []int, need int) error {
	replies := c.onNodes(ctx, nodes, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return scriptFence.Run(ctx, n, k.withFence(), token, strconv.FormatInt(fence, 10)).Result()
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

func (c *Client) unavailable(reachable int, errs []error) error {
	if len(c.nodes) == 1 {
		return errors.Join(errs...)
	}
	return fmt.Errorf("redislock: %d of %d nodes answered, quorum is %d: %w", reachable, len(c.nodes), c.quorum, errors.Join(errs...))
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
		return scriptUndo.Run(ctx, n, k.lockMeta(), token, attempt).Result()
	})
}

// isTimeout reports whether err left it open if the command reached the server: a refused
// connection did not send it, a timeout may have.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
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
// when the lock was granted.
func (l *Lock) Readopted() bool {
	if l == nil {
		return false
	}
	return l.readopted
}

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
	return l.client.now().Before(l.ValidUntil())
}

// Renew extends the lease to ttl (0 keeps the current lease length) if the lock is still ours.
// It returns ErrLockLost when the lock is gone or held by someone else, ErrNotHeld after Release,
// and other errors when Redis could not answer (the lock may still be ours; retry until ValidUntil).
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotHeld
	}
	if ttl == 0 {
		ttl = l.LeaseTTL()
	}
	ttl = ttl.Truncate(time.Millisecond) // what Redis keeps (see Acquire)
	if err := validateTTL(ttl); err != nil {
		return err
	}
	switch l.state.Load() {
	case stateReleased:
		return ErrNotHeld
	case stateLost:
		return ErrLockLost
	}
	c := l.client
	start := c.now()
	ttlMs := ttl.Milliseconds()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return scriptRenew.Run(ctx, n, l.keys.lockMeta(), l.token, ttlMs).Result()
	})
	if err := l.settleRenew(tallyInts(replies), start, c.now(), ttl); err != nil {
		return fmt.Errorf("renew %s: %w", l.key, err)
	}
	return nil
}

// settleRenew turns the nodes' answers to a renew into the lock's new state and the caller's
// error. Shared by Renew and the Keeper, so both judge a renewal the same way.
func (l *Lock) settleRenew(t tally, start, now time.Time, ttl time.Duration) error {
	c := l.client
	switch {
	case t.ok >= c.quorum:
		validUntil := c.validUntil(start, ttl)
		if !now.Before(validUntil) {
			// Redis extended the key, but the answer came back after the lease we asked for had run
			// out (a pause, a very slow network): we cannot know whether someone else held it since.
			l.markLost()
			return fmt.Errorf("%w: renew answered after the lease ran out", ErrLockLost)
		}
		l.mu.Lock()
		l.ttl, l.leaseStart, l.validUntil = ttl, start, validUntil
		l.mu.Unlock()
		return nil
	case t.no > len(c.nodes)-c.quorum:
		l.markLost()
		return ErrLockLost
	default:
		return c.unavailable(t.ok+t.no, t.errs)
	}
}

func (l *Lock) markLost() { l.state.CompareAndSwap(stateHeld, stateLost) }

// Release deletes the lock if it is still ours and, with WithReleaseNotifications, tells waiters.
// A lock acquired WithQueue goes straight to the next waiter in its queue (see WithQueue).
// It returns ErrNotHeld if the lock had expired or was taken by someone else in the meantime (their
// lock is left untouched), and other errors when Redis could not answer (call it again).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil || l.state.Load() == stateReleased {
		return ErrNotHeld
	}
	c := l.client
	script, keys := scriptRelease, l.keys.lockMeta()
	if l.queued {
		script, keys = scriptReleaseHandoff, l.keys.withQueue()
	}
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return script.Run(ctx, n, keys, l.token, c.notify).Result()
	})
	t := tallyInts(replies)
	switch {
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

// TTL returns the lease left on the lock as Redis sees it (the shortest among a Redlock majority),
// or ErrNotHeld if it is no longer ours.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, ErrNotHeld
	}
	c := l.client
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return scriptPTTL.Run(ctx, n, l.keys[:1], l.token).Int64()
	})
	var ttls []time.Duration
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		if ms, _ := r.val.(int64); ms >= 0 {
			ttls = append(ttls, time.Duration(ms)*time.Millisecond)
		}
	}
	if len(ttls) >= c.quorum {
		// The lock lives as long as its quorum: the quorum-th longest lease.
		slices.Sort(ttls)
		slices.Reverse(ttls)
		return ttls[c.quorum-1], nil
	}
	if len(replies)-len(errs) >= c.quorum || len(errs) == 0 {
		return 0, fmt.Errorf("ttl %s: %w", l.key, ErrNotHeld)
	}
	return 0, fmt.Errorf("ttl %s: %w", l.key, c.unavailable(len(replies)-len(errs), errs))
}

// State is what anyone can learn about a lock without holding it.
type State struct {
	// Held reports whether someone holds the lock (on a majority of nodes for Redlock).
	Held bool
	// TTL is the lease left on the lock, if held.
	TTL time.Duration
	// Metadata is what the holder stored with WithMetadata, if held.
	Metadata string
	// Fence is the last fencing token handed out for this lock (0 if never).
	Fence int64
}

// Inspect reads a lock's state without taking it, e.g. for a waiter to show who blocks it.
// It never reveals the holder's token.
func (c *Client) Inspect(ctx context.Context, key string) (State, error) {
	if err := validateKey(key); err != nil {
		return State{}, err
	}
	k := c.keysFor(key, false)
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return scriptInspect.Run(ctx, n, k.withFence()).Slice()
	})
	var st State
	var errs []error
	var ttls []time.Duration
	answered := 0
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		answered++
		vals, _ := r.val.([]any)
		if len(vals) != 3 {
			errs = append(errs, fmt.Errorf("unexpected inspect reply %v", r.val))
			continue
		}
		if f, ok := vals[2].(string); ok {
			n, _ := strconv.ParseInt(f, 10, 64)
			st.Fence = max(st.Fence, n)
		}
		if pttl, _ := vals[0].(int64); pttl > 0 || pttl == -1 {
			ttls = append(ttls, time.Duration(max(pttl, 0))*time.Millisecond)
			if m, ok := vals[1].(string); ok {
				st.Metadata = m
			}
		}
	}
	if answered < c.quorum {
		return State{}, fmt.Errorf("inspect %s: %w", key, c.unavailable(answered, errs))
	}
	if len(ttls) >= c.quorum {
		slices.Sort(ttls)
		slices.Reverse(ttls)
		st.Held, st.TTL = true, ttls[c.quorum-1]
	} else {
		st.Metadata = ""
	}
	return st, nil
}

// Released is one announcement of the release channel: a lock was freed, and, when its release
// handed it to the head of its queue, the queue member it went to. Anyone who can publish on the
// channel can announce anything: act on it only by asking Redis.
type Released struct {
	Key      string // the lock's Redis key
	HandedTo string // the queue member the release handed the lock to; "" when it was simply freed
	// Missed says the subscription broke and was made again: releases in between went unannounced.
	// Key and HandedTo are empty; whoever waits should ask Redis.
	Missed bool
}

// SubscribeReleases delivers every release of a lock through a client configured with
// WithReleaseNotifications(channel). The channel closes when ctx ends. Messages can be lost (Redis
// pub/sub has no delivery guarantee; a broken subscription is made again and told as Missed) and
// expiries are not announced: use it to act sooner, never as the only way to notice a free lock.
func (c *Client) SubscribeReleases(ctx context.Context) (<-chan Released, error) {
	if c.notify == "" {
		return nil, invalidf("SubscribeReleases needs a client built WithReleaseNotifications")
	}
	out := make(chan Released, 64)
	var subs []*redis.PubSub
	for i, n := range c.nodes {
		ps := n.Subscribe(ctx, c.notify)
		// Receive once so a Redis that is down fails here, not silently later.
		if _, err := ps.Receive(ctx); err != nil {
			_ = ps.Close()
			if len(c.nodes) == 1 {
				return nil, &NodeError{Node: i, Addr: nodeAddr(n), Err: err}
			}
			continue // a Redlock minority may be down; the majority still announces releases
		}
		subs = append(subs, ps)
	}
	if len(subs) == 0 {
		return nil, c.unavailable(0, nil)
	}
	var wg sync.WaitGroup
	for _, ps := range subs {
		wg.Go(func() {
			defer func() { _ = ps.Close() }()
			// With subscriptions, so a reconnection shows: go-redis subscribes again by itself, and
			// the confirmation is all that tells of the messages lost in between.
			msgs := ps.ChannelWithSubscriptions()
			for {
				var rel Released
				select {
				case <-ctx.Done():
					return
				case m, ok := <-msgs:
					if !ok {
						return
					}
					switch m := m.(type) {
					case *redis.Message:
						r := parseRelease(m.Payload)
						rel = Released{Key: r.key, HandedTo: r.member}
					case *redis.Subscription:
						rel = Released{Missed: true}
					default:
						continue
					}
				}
				select {
				case out <- rel:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out, nil
}

func newToken() (string, error) { return randomID("token", tokenBytes) }

// newAttemptID runs once per attempt, so it builds the id in fixed buffers: one allocation.
func newAttemptID() (string, error) {
	var b [attemptBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redislock: generate attempt id: %w", err)
	}
	var text [(attemptBytes*8 + 5) / 6]byte
	base64.RawURLEncoding.Encode(text[:], b[:])
	return string(text[:]), nil
}

func randomID(what string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("redislock: generate %s: %w", what, err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// grant is one node's answer to an acquisition attempt (acquire.lua).
type grant struct {
	ok        bool
	fence     int64
	readopted bool   // ok, and the lock already held our token
	position  int    // not ok: place in the queue (0 without one)
	holder    string // not ok: the holder's metadata
}

// acquireReply parses acquire.lua's reply: {1, fence, readopted} when acquired, {0, position[, holder]}
// when not.
func acquireReply(v any) (grant, error) {
	vals, isSlice := v.([]any)
	if !isSlice || len(vals) < 2 || len(vals) > 3 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	flag, ok1 := vals[0].(int64)
	n, ok2 := vals[1].(int64)
	if !ok1 || !ok2 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	if flag == 1 {
		readopted, _ := vals[len(vals)-1].(int64)
		return grant{ok: true, fence: n, readopted: len(vals) == 3 && readopted == 1}, nil
	}
	var holder string
	if len(vals) == 3 {
		holder, _ = vals[2].(string)
	}
	return grant{position: int(n), holder: holder}, nil
}

// Dequeue takes member out of the queue of the lock named key (see WithQueue): member no longer
// wants the lock. If a release handed member the lock in the meantime, Dequeue gives it back and
// hands it on, unless member already claimed it with another attempt (as a waiting Acquire does when
// a release wakes it up); do not Dequeue a member that holds its lock. On a single deployment, a
// lock that is free (its lease ran out) while others wait is handed to the new head as well.
// Removing a member that is not queued is not an error.
func (c *Client) Dequeue(ctx context.Context, key, member string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	keys := c.keysFor(key, true).withQueue()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return scriptDequeue.Run(ctx, n, keys, member, c.notify, handsOffArg(c.handsOff())).Result()
	})
	if t := tallyInts(replies); len(t.errs) > len(c.nodes)-c.quorum {
		return fmt.Errorf("dequeue %s: %w", key, c.unavailable(len(replies)-len(t.errs), t.errs))
	}
	return nil
}

func handsOffArg(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// ReleaseToken deletes the lock named key if token holds it: Release for a process that knows its
// token but has no *Lock, such as an operator that restarted. On a single deployment it hands the
// lock to the head of its queue, as Release does for a lock acquired WithQueue. It returns
// ErrNotHeld if token does not hold the lock (nothing is touched).
func (c *Client) ReleaseToken(ctx context.Context, key, token string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if token == "" {
		return invalidf("empty token")
	}
	if err := validateToken(token); err != nil {
		return err
	}
	l := &Lock{client: c, key: key, keys: c.keysFor(key, c.handsOff()), token: token, queued: c.handsOff()}
	return l.Release(ctx)
}

// tally counts the nodes that answered 1 (done), 0 (not ours) or failed.
type tally struct {
	ok, no int
	errs   []error
}

func tallyInts(replies []nodeReply) tally {
	var t tally
	for _, r := range replies {
		if r.err != nil {
			t.errs = append(t.errs, r.err)
			continue
		}
		if n, _ := r.val.(int64); n == 1 {
			t.ok++
		} else {
			t.no++
		}
	}
	return t
}
