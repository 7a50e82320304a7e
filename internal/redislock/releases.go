package redislock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Released is one announcement of the release channel: a lock was freed, and, when its release
// handed it to the head of its queue, the queue member it went to. Anyone who can publish on the
// channel can announce anything: act on it only by asking Redis.
type Released struct {
	Key      string // the lock's Redis key
	HandedTo string // the queue member the release handed the lock to; "" when it was simply freed
	// Slot is the semaphore slot handed off (see WithPermits); 0 for a plain lock, slot 0, or a
	// release that handed nothing off. Key is always the lock's (slot 0's) Redis key.
	Slot int
	// Missed says the subscription broke and was made again: releases in between went unannounced.
	// Key and HandedTo are empty; whoever waits should ask Redis.
	Missed bool
}

// SubscribeReleases delivers every release of a lock through a client configured with
// WithReleaseNotifications(channel). The channel closes when ctx ends. Messages can be lost (Redis
// pub/sub has no delivery guarantee; a broken subscription is made again and told as Missed) and
// expiries are not announced: use it to act sooner, never as the only way to notice a free lock.
func (c *Client) SubscribeReleases(ctx context.Context) (<-chan Released, error) {
	if c.releases == nil {
		return nil, invalidf("SubscribeReleases needs a client built WithReleaseNotifications")
	}
	s := &subscriber{ctx: ctx, out: make(chan Released, subscriberBuffer)}
	var joined []int
	var errs []error
	for i := range c.nodes {
		// Wait for the node's first answer, so a Redis that is down fails here, not silently later.
		if err := c.releases.join(ctx, i, s); err != nil {
			if len(c.nodes) == 1 {
				return nil, err
			}
			errs = append(errs, err) // a Redlock minority may be down; the majority still announces
			continue
		}
		joined = append(joined, i)
	}
	if len(joined) == 0 {
		return nil, c.unavailable(0, errs)
	}
	go func() {
		<-ctx.Done()
		c.releases.unsubscribe(s, joined)
	}()
	return s.out, nil
}

// release is one message from the release channel: a lock was freed, or freed and handed to the
// waiter at the head of its queue (see queue.lua, handoff). Anyone who can publish on the channel
// can send one, so it only ever wakes a waiter up; Redis says whether the lock is its.
type release struct {
	key       string // the lock's Redis key
	handedOff bool
	member    string // the waiter it went to
	attempt   string // the attempt whose ticket the handoff honoured
	slot      int    // the semaphore slot handed off (0 when the message names none)
}

// parseRelease reads a release message: the lock key alone, or key, fence, lease in ms, attempt,
// member and, for a semaphore slot above 0, the slot, separated by NUL bytes (fence and lease are
// for other readers). Messages without the slot (slot 0, and every message before semaphores) read
// as slot 0.
func parseRelease(payload string) release {
	key, rest, handedOff := strings.Cut(payload, "\x00")
	if !handedOff {
		return release{key: payload}
	}
	_, rest, _ = strings.Cut(rest, "\x00") // fence
	_, rest, _ = strings.Cut(rest, "\x00") // lease
	attempt, rest, _ := strings.Cut(rest, "\x00")
	member, slotField, _ := strings.Cut(rest, "\x00")
	slot, err := strconv.Atoi(slotField)
	if err != nil || slot < 0 || slot >= MaxPermits {
		slot = 0 // absent or forged: a message is only a wake-up, and no reader indexes past a slot
	}
	return release{key: key, handedOff: true, member: member, attempt: attempt, slot: slot}
}

// releaseWatch is one waiting Acquire's interest in the releases of one lock.
type releaseWatch struct {
	key, member string
	ch          chan release
}

// watchBuffer is how many releases a waiter may fall behind by; more are dropped, which costs the
// waiter at most one retry interval.
const watchBuffer = 8

// subscriberBuffer is how many announcements a SubscribeReleases reader may fall behind by before
// the node's reader waits for it.
const subscriberBuffer = 64

// resubscribeWait is the pause between two failed attempts to subscribe, so a node that is away
// is not hammered.
const resubscribeWait = 100 * time.Millisecond

// releaseHub is the one reader of a Client's release channel: one subscription per Redis node,
// shared by the queued Acquire calls that wait (watches, on a single deployment's node) and by the
// readers of SubscribeReleases. A node's subscription exists only while someone listens to it.
// Pub/sub may drop messages; the waiters' retries remain the safety net, so a lost message costs
// time, never correctness. A SubscribeReleases reader more than subscriberBuffer announcements
// behind holds back its node's reader, and with it the waiters' wake-ups, until it catches up or
// its context ends: it asked for every announcement, and Redis buffers for a slow subscriber too.
type releaseHub struct {
	nodes   []redis.UniversalClient
	channel string

	mu   sync.Mutex
	subs []*nodeSubscription // by node index; nil while nobody listens to the node
}

// nodeSubscription is the subscription to the release channel on one node, and who listens to it.
type nodeSubscription struct {
	listeners int // watches plus subscribers: the subscription ends when it drops to 0
	stop      context.CancelFunc

	watches     map[string]map[*releaseWatch]struct{} // by lock key
	subscribers map[*subscriber]struct{}

	// tried is closed once the first attempt to subscribe came back; err is the latest attempt's
	// error until one succeeds.
	tried chan struct{}
	err   error
}

// subscriber is one SubscribeReleases call.
type subscriber struct {
	ctx context.Context
	out chan Released
	// sending counts the node readers that are handing it an announcement, so out is closed only
	// after the last of them let go.
	sending sync.WaitGroup
}

func newReleaseHub(nodes []redis.UniversalClient, channel string) *releaseHub {
	return &releaseHub{nodes: nodes, channel: channel, subs: make([]*nodeSubscription, len(nodes))}
}

// joinLocked counts one more listener of node i and starts its subscription if it is the first.
func (h *releaseHub) joinLocked(i int) *nodeSubscription {
	ns := h.subs[i]
	if ns == nil {
		ctx, stop := context.WithCancel(context.Background())
		ns = &nodeSubscription{
			stop:        stop,
			watches:     make(map[string]map[*releaseWatch]struct{}),
			subscribers: make(map[*subscriber]struct{}),
			tried:       make(chan struct{}),
		}
		h.subs[i] = ns
		go h.read(ctx, i, ns)
	}
	ns.listeners++
	return ns
}

// leaveLocked counts one listener of node i less and ends its subscription after the last.
func (h *releaseHub) leaveLocked(i int) {
	ns := h.subs[i]
	ns.listeners--
	if ns.listeners == 0 {
		ns.stop()
		h.subs[i] = nil
	}
}

// watch registers a waiting Acquire's interest in the releases of the lock key. Only a single
// deployment hands locks off, so a watch listens to node 0.
func (h *releaseHub) watch(key, member string) *releaseWatch {
	w := &releaseWatch{key: key, member: member, ch: make(chan release, watchBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.joinLocked(0)
	set := ns.watches[key]
	if set == nil {
		set = make(map[*releaseWatch]struct{})
		ns.watches[key] = set
	}
	set[w] = struct{}{}
	return w
}

func (h *releaseHub) unwatch(w *releaseWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ns := h.subs[0]
	if ns == nil {
		return
	}
	set := ns.watches[w.key]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(ns.watches, w.key)
	}
	h.leaveLocked(0)
}

// unsubscribe ends s on the nodes it joined and closes its channel once no reader hands it
// anything any more.
func (h *releaseHub) unsubscribe(s *subscriber, joined []int) {
	h.mu.Lock()
	for _, i := range joined {
		delete(h.subs[i].subscribers, s)
		h.leaveLocked(i)
	}
	h.mu.Unlock()
	s.sending.Wait()
	close(s.out)
}

// join adds s to the listeners of node i once the node's subscription is confirmed.
func (h *releaseHub) join(ctx context.Context, i int, s *subscriber) error {
	h.mu.Lock()
	ns := h.joinLocked(i)
	h.mu.Unlock()
	var err error
	select {
	case <-ns.tried:
		h.mu.Lock()
		err = ns.err
		h.mu.Unlock()
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.leaveLocked(i)
		return &NodeError{Node: i, Addr: nodeAddr(h.nodes[i]), Err: err}
	}
	ns.subscribers[s] = struct{}{}
	return nil
}

// read is the one reader of node i's release channel while anyone listens to it.
func (h *releaseHub) read(ctx context.Context, i int, ns *nodeSubscription) {
	ps := h.nodes[i].Subscribe(ctx, h.channel)
	// Closing the subscription is what ends a blocked receive; the context alone does not.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() { stop(); _ = ps.Close() }()
	if !h.confirm(ctx, ps, ns) {
		return
	}
	// With subscriptions, so a reconnection shows: go-redis subscribes again by itself, and the
	// confirmation is all that tells of the messages lost in between.
	msgs := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Message:
				h.dispatch(ns, parseRelease(m.Payload))
			case *redis.Subscription:
				h.announce(ns, Released{Missed: true})
			}
		}
	}
}

// confirm receives the node's first subscription confirmation, trying again while the node is
// away, and tells who waits for it how the first try went. It reports false when ctx ended first.
func (h *releaseHub) confirm(ctx context.Context, ps *redis.PubSub, ns *nodeSubscription) bool {
	first := true
	for {
		_, err := ps.Receive(ctx)
		h.mu.Lock()
		ns.err = err
		h.mu.Unlock()
		if first {
			close(ns.tried)
			first = false
		}
		if err == nil {
			return true
		}
		// go-redis reconnects on the next receive; do not spin while Redis is away.
		select {
		case <-ctx.Done():
			return false
		case <-time.After(resubscribeWait):
		}
	}
}

// dispatch passes a release to the watches it concerns (a handoff to its waiter only, a plain
// release to every waiter of the lock) and announces it to every subscriber.
func (h *releaseHub) dispatch(ns *nodeSubscription, r release) {
	h.mu.Lock()
	for w := range ns.watches[r.key] {
		if r.handedOff && r.member != w.member {
			continue
		}
		select {
		case w.ch <- r:
		default: // the waiter is behind; its retry covers what it misses
		}
	}
	h.mu.Unlock()
	h.announce(ns, Released{Key: r.key, HandedTo: r.member, Slot: r.slot})
}

// announce hands rel to every subscriber of the node, waiting for each reader that is behind
// until its context ends.
func (h *releaseHub) announce(ns *nodeSubscription, rel Released) {
	h.mu.Lock()
	subs := make([]*subscriber, 0, len(ns.subscribers))
	for s := range ns.subscribers {
		s.sending.Add(1)
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		select {
		case s.out <- rel:
		case <-s.ctx.Done():
		}
		s.sending.Done()
	}
}
