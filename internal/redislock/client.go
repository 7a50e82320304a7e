package redislock

import (
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
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

	waitReplicas int
	waitTimeout  time.Duration

	// markRetention is the release mark's retention in ms as a script argument ("0": no marks;
	// always on Redlock, see WithReleaseMarkRetention), boxed once: every release passes it.
	markRetention any

	releases *releaseHub // the release channel's reader; nil without WithReleaseNotifications
	// memberSecret derives the tokens of queued waiters that bring none (see memberToken).
	memberSecret [32]byte
	memberMACs   sync.Pool // of hash.Hash keyed with memberSecret: queued waiters acquire in a loop

	late lateReleases // undos of failed attempts on nodes that did not answer (see releaseLate)
	lead fenceLead    // Redlock: how far ahead of the clock to propose fencing tokens
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

// noMarks is the release scripts' argument for a release that leaves no mark.
var noMarks any = "0"

// WithReleaseMarkRetention makes every release on a single deployment leave a mark in Redis for d
// (default: no marks). The mark lets a holder that released a lock and lost the answer (a reply
// that did not come back, a process that restarted before it recorded the release) tell its own
// release from a lease that ran out: Release asked again, or ReleaseToken given the fence it held,
// answers nil, where it would answer ErrNotHeld once another holder has the lock. Each release
// keeps one key for d (releases with one token share it), so choose d by the release rate: long
// enough for a holder to come back and ask, short enough for the keys it keeps. Redlock leaves no
// marks, since a node's counter need not be the quorum's fence.
func WithReleaseMarkRetention(d time.Duration) Option {
	return func(c *Client) { c.markRetention = strconv.FormatInt(max(d.Milliseconds(), 0), 10) }
}

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
// the acquisition (Redis WAIT, bounded by timeout) and fail otherwise, undoing the acquisition. It
// narrows, without closing, the window in which a failover to a replica that never saw the lock
// lets a second holder in. Default: off. Not for Redis Cluster clients.
func WithWaitReplicas(replicas int, timeout time.Duration) Option {
	return func(c *Client) { c.waitReplicas, c.waitTimeout = replicas, timeout }
}

// New returns a client for one Redis deployment: a single node, Sentinel or Cluster
// (any redis.UniversalClient).
func New(client redis.UniversalClient, opts ...Option) (*Client, error) {
	if client == nil {
		return nil, invalidf("nil redis client")
	}
	return newClient([]redis.UniversalClient{client}, 0, opts)
}

// NewRedlock returns a client that acquires each lock on a majority of independent Redis nodes.
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
	if c.notify != "" {
		c.releases = newReleaseHub(nodes, c.notify)
	}
	if !c.handsOff() || c.markRetention == nil {
		c.markRetention = noMarks
	}
	return c, nil
}

// handsOff reports whether releasing a queued lock hands it straight to the head of its queue.
// Only a single deployment does: Redlock nodes keep separate queues, and handing a lock to
// different waiters on different nodes would leave nobody with a majority until the leases ran out.
func (c *Client) handsOff() bool { return len(c.nodes) == 1 }

// Admits is how many holders at once this deployment gives a lock that declares n permits: n on
// one deployment, one on Redlock, whose nodes would choose slots on their own. WithPermits and
// SetPermits refuse what it would lower; callers that decide before they call ask it.
func (c *Client) Admits(n int) int {
	if n > 1 && !c.handsOff() {
		return 1
	}
	return n
}

// HandsOff reports whether a release hands a queued lock straight to the head of its queue and
// announces whom it went to (Released.HandedTo): a single deployment (one Redis, Sentinel or
// Cluster), not Redlock.
func (c *Client) HandsOff() bool { return c.handsOff() }

// Nodes returns the number of Redis nodes behind the client (1 unless Redlock).
func (c *Client) Nodes() int { return len(c.nodes) }

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
