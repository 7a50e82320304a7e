package redislock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// release is one message from the release channel: a lock was freed, or freed and handed to the
// waiter at the head of its queue (see queue.lua, handoff). Anyone who can publish on the channel
// can send one, so it only ever wakes a waiter up; Redis says whether the lock is its.
type release struct {
	key       string // the lock's Redis key
	handedOff bool
	member    string // the waiter it went to
	attempt   string // the attempt whose ticket the release granted
}

// parseRelease reads a release message: the lock key alone, or key, fence, lease in ms, attempt and
// member separated by NUL bytes (fence and lease are for other readers).
func parseRelease(payload string) release {
	key, rest, handedOff := strings.Cut(payload, "\x00")
	if !handedOff {
		return release{key: payload}
	}
	_, rest, _ = strings.Cut(rest, "\x00") // fence
	_, rest, _ = strings.Cut(rest, "\x00") // lease
	attempt, member, _ := strings.Cut(rest, "\x00")
	return release{key: key, handedOff: true, member: member, attempt: attempt}
}

// releaseWatch is one waiting Acquire's interest in the releases of one lock.
type releaseWatch struct {
	key, member string
	ch          chan release
}

// watchBuffer is how many releases a waiter may fall behind by; more are dropped, which costs the
// waiter at most one retry interval.
const watchBuffer = 8

// notifier shares one pub/sub subscription among the queued Acquire calls of a Client that are
// waiting, so a waiter learns within a push that a release handed it the lock, instead of at its
// next retry. The subscription exists only while someone waits. Pub/sub may drop messages; the
// waiters' retries remain the safety net, so a lost message costs time, never correctness.
type notifier struct {
	client  redis.UniversalClient
	channel string

	mu      sync.Mutex
	watches map[string]map[*releaseWatch]struct{} // by lock key
	n       int
	stop    context.CancelFunc
}

func (nt *notifier) watch(key, member string) *releaseWatch {
	w := &releaseWatch{key: key, member: member, ch: make(chan release, watchBuffer)}
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.watches == nil {
		nt.watches = make(map[string]map[*releaseWatch]struct{})
	}
	set := nt.watches[key]
	if set == nil {
		set = make(map[*releaseWatch]struct{})
		nt.watches[key] = set
	}
	set[w] = struct{}{}
	nt.n++
	if nt.n == 1 {
		ctx, stop := context.WithCancel(context.Background())
		nt.stop = stop
		go nt.run(ctx)
	}
	return w
}

func (nt *notifier) unwatch(w *releaseWatch) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	set := nt.watches[w.key]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(nt.watches, w.key)
	}
	nt.n--
	if nt.n == 0 {
		nt.stop()
		nt.stop = nil
	}
}

func (nt *notifier) run(ctx context.Context) {
	ps := nt.client.Subscribe(ctx, nt.channel)
	// Closing the subscription is what ends a blocked receive; the context alone does not.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() { stop(); _ = ps.Close() }()
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// go-redis reconnects on the next receive; do not spin while Redis is away.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		nt.dispatch(parseRelease(msg.Payload))
	}
}

// dispatch passes a release to the watches it concerns: a handoff to its waiter only, a plain
// release to every waiter of the lock.
func (nt *notifier) dispatch(r release) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for w := range nt.watches[r.key] {
		if r.handedOff && r.member != w.member {
			continue
		}
		select {
		case w.ch <- r:
		default: // the waiter is behind; its retry covers what it misses
		}
	}
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
