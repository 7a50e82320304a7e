package redislock

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// MinTTL is the shortest lease Acquire accepts: Redis expires keys with millisecond precision.
	MinTTL = time.Millisecond

	maxKeyLen = 1024

	defaultNodeTimeout     = 50 * time.Millisecond
	defaultDriftFactor     = 0.01
	defaultRedlockDriftAdd = 2 * time.Millisecond
)

// Client acquires locks from one Redis deployment (New) or from a quorum of independent nodes
// (NewRedlock). It is safe for concurrent use.
type Client struct {
	nodes  []redis.UniversalClient
	all    []int // 0..len(nodes)-1, the default node set of onNodes
	quorum int

	prefix      string
	nodeTimeout time.Duration
	driftFactor float64
	driftAdd    time.Duration
	notify      string
	now         func() time.Time

	waitReplicas int
	waitTimeout  time.Duration

	releases *notifier // nil unless the client hands locks off (see handsOff)
	// memberSecret derives the tokens of queued waiters that bring none (see memberToken).
	memberSecret [32]byte
	memberMACs   sync.Pool // of hash.Hash keyed with memberSecret: queued waiters acquire in a loop

	late lateReleases // undos of failed attempts on nodes that did not answer (see releaseLate)
}

// Option configures a Client.
type Option func(*Client)

// WithKeyPrefix puts prefix in front of every key the client writes (default: none), so several
// applications can share one Redis without colliding. The prefix must not contain { or }: a brace
// would change the hash tag that keeps a lock's keys in one Redis Cluster slot.
func WithKeyPrefix(prefix string) Option { return func(c *Client) { c.prefix = prefix } }

// WithNodeTimeout bounds each Redlock node call (default 50ms), so a slow or paused node cannot
// stall an acquisition past it. A single-node client relies on the caller's context instead.
func WithNodeTimeout(d time.Duration) Option { return func(c *Client) { c.nodeTimeout = d } }

// WithDrift sets the clock-drift allowance subtracted from every lease: ttl*factor + add.
// Defaults: factor 0.01, add 2ms for Redlock and 0 for a single node.
func WithDrift(factor float64, add time.Duration) Option {
	return func(c *Client) { c.driftFactor, c.driftAdd = factor, add }
}

// WithReleaseNotifications makes Release publish the lock's Redis key on channel, so waiters can
// try again at once instead of at their next backoff (see Client.SubscribeReleases). On a single
// Redis deployment it also lets a queued Acquire (WithQueue) that waits with retries learn within one
// push that a release handed it the lock. Default: off.
func WithReleaseNotifications(channel string) Option { return func(c *Client) { c.notify = channel } }

// WithWaitReplicas makes Acquire wait until at least replicas replicas of the primary acknowledged
// the acquisition (Redis WAIT, bounded by timeout) and fail otherwise, releasing what it took. It
// narrows, without closing, the window in which a failover to a replica that never saw the lock
// lets a second holder in. Default: off. Not for Redis Cluster clients.
func WithWaitReplicas(replicas int, timeout time.Duration) Option {
	return func(c *Client) { c.waitReplicas, c.waitTimeout = replicas, timeout }
}

// WithClock replaces time.Now, which the client uses to measure validity. For tests.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// New returns a client for one Redis deployment: a single node, Sentinel or Cluster
// (any redis.UniversalClient).
func New(client redis.UniversalClient, opts ...Option) (*Client, error) {
	if client == nil {
		return nil, invalidf("nil redis client")
	}
	return newClient([]redis.UniversalClient{client}, 0, opts)
}

// NewRedlock returns a client that takes each lock on a majority of independent Redis nodes.
// The number of nodes must be odd and at least 3: an even count adds a node without adding
// failure tolerance.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(clients) < 3 || len(clients)%2 == 0 {
		return nil, invalidf("redlock needs an odd number of nodes, at least 3; got %d", len(clients))
	}
	for i, cl := range clients {
		if cl == nil {
			return nil, invalidf("redlock node %d: nil redis client", i)
		}
	}
	return newClient(clients, defaultRedlockDriftAdd, opts)
}

func newClient(nodes []redis.UniversalClient, driftAdd time.Duration, opts []Option) (*Client, error) {
	c := &Client{
		nodes:       nodes,
		all:         make([]int, len(nodes)),
		quorum:      len(nodes)/2 + 1,
		nodeTimeout: defaultNodeTimeout,
		driftFactor: defaultDriftFactor,
		driftAdd:    driftAdd,
		now:         time.Now,
		late:        lateReleases{limit: defaultLateReleaseLimit},
	}
	for i := range c.all {
		c.all[i] = i
	}
	_, _ = rand.Read(c.memberSecret[:]) // never fails on supported platforms (crypto/rand docs)
	for _, o := range opts {
		o(c)
	}
	if strings.ContainsAny(c.prefix, "{}") {
		return nil, invalidf("key prefix %q must not contain { or }", c.prefix)
	}
	if c.notify != "" && c.handsOff() {
		c.releases = &notifier{client: nodes[0], channel: c.notify}
	}
	return c, nil
}

// handsOff reports whether releasing a queued lock hands it straight to the head of its queue.
// Only a single deployment does: Redlock nodes keep separate queues, and handing a lock to
// different waiters on different nodes would leave nobody with a majority until the leases ran out.
func (c *Client) handsOff() bool { return len(c.nodes) == 1 }

// HandsOff reports whether a release hands a queued lock straight to the head of its queue and
// announces whom it went to (Released.HandedTo): a single deployment (one Redis, Sentinel or
// Cluster), not Redlock.
func (c *Client) HandsOff() bool { return c.handsOff() }

// memberToken is the token of a queued waiter that brings none: stable for one member of one Client,
// so a lock that a release handed to member is claimed by member's next Acquire, and unguessable
// for anyone without the Client's secret.
func (c *Client) memberToken(member string) string {
	m, _ := c.memberMACs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, c.memberSecret[:])
	}
	m.Reset()
	m.Write([]byte(member))
	var sum [sha256.Size]byte
	token := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:tokenBytes])
	c.memberMACs.Put(m)
	return token
}

// Nodes returns the number of Redis nodes behind the client (1 unless Redlock).
func (c *Client) Nodes() int { return len(c.nodes) }

// Quorum returns how many nodes must agree for an operation to succeed.
func (c *Client) Quorum() int { return c.quorum }

// RedisKey returns the Redis key that holds the lock named key.
func (c *Client) RedisKey(key string) string { return c.prefix + "{" + key + "}" }

// keys lists the Redis keys of one lock in the order every script takes them: lock, meta, fence,
// then, for a lock used with a queue, queue, waiters and tickets (see queue.lua). They share
// the hash tag {key}, so a Redis Cluster keeps them in one slot and a script may touch all of them.
// Scripts get sub-slices (lockMeta, withFence, withQueue), so no call builds a key list
// again.
type keys []string

// keySuffixes name a lock's keys after the lock key itself, in keys order.
var (
	keySuffixes       = []string{":meta", ":fence"}
	queuedKeySuffixes = []string{":meta", ":fence", ":queue", ":waiters", ":tickets"}
)

// keysFor runs on every Acquire, so it builds all keys in one string: each key after the first is the
// lock key and its suffix, and the lock key is the start of that string.
func (c *Client) keysFor(key string, queued bool) keys {
	suffixes := keySuffixes
	if queued {
		suffixes = queuedKeySuffixes
	}
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

// drift is the part of a lease that the client does not trust: clocks of client and servers run
// at slightly different rates, and Redis expires with millisecond precision.
func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + c.driftAdd
}

// validUntil is the instant until which a lease that Redis granted for ttl, asked for at start,
// is safe to rely on.
func (c *Client) validUntil(start time.Time, ttl time.Duration) time.Time {
	return start.Add(ttl - c.drift(ttl))
}

// nodeReply is what one node answered to one script call.
type nodeReply struct {
	val any
	err error
}

// onNodes runs call on the nodes whose indexes are in which (all nodes if which is nil) and returns
// their replies in the same order. A single node is called inline with the caller's context, so the
// common case costs no goroutine. Redlock nodes are called concurrently, each bounded by the node
// timeout; a node that has not answered by then counts as failed even if its client ignores context
// deadlines.
func (c *Client) onNodes(ctx context.Context, which []int, call func(ctx context.Context, n redis.UniversalClient) (any, error)) []nodeReply {
	if which == nil {
		which = c.all
	}
	if len(c.nodes) == 1 {
		replies := make([]nodeReply, len(which))
		for j, i := range which {
			v, err := call(ctx, c.nodes[i])
			if err != nil {
				err = &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: err}
			}
			replies[j] = nodeReply{val: v, err: err}
		}
		return replies
	}

	type indexed struct {
		j int
		nodeReply
	}
	// Buffered, so a straggler we stopped waiting for can still send and exit.
	ch := make(chan indexed, len(which))
	for j, i := range which {
		go func() {
			nctx, cancel := context.WithTimeout(ctx, c.nodeTimeout)
			defer cancel()
			v, err := call(nctx, c.nodes[i])
			ch <- indexed{j, nodeReply{v, err}}
		}()
	}

	replies := make([]nodeReply, len(which))
	answered := make([]bool, len(which))
	// A little grace past the per-node timeout lets a client that honours deadlines report its
	// own error; past it we stop waiting.
	deadline := time.NewTimer(c.nodeTimeout + c.nodeTimeout/2)
	defer deadline.Stop()
collect:
	for range which {
		select {
		case r := <-ch:
			replies[r.j], answered[r.j] = r.nodeReply, true
		case <-deadline.C:
			break collect
		}
	}
	for j, i := range which {
		if !answered[j] {
			replies[j].err = fmt.Errorf("no answer within %v: %w", c.nodeTimeout, context.DeadlineExceeded)
		}
		if replies[j].err != nil {
			replies[j].err = &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: replies[j].err}
		}
	}
	return replies
}

func nodeAddr(n redis.UniversalClient) string {
	if cl, ok := n.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("%T", n)
}

// Ping checks that enough nodes answer to acquire locks: the only node, or a Redlock majority.
func (c *Client) Ping(ctx context.Context) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return n.Ping(ctx).Result()
	})
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(replies)-len(errs) < c.quorum {
		return c.unavailable(len(replies)-len(errs), errs)
	}
	return nil
}
