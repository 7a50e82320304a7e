//go:build fault

package fault

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseEvery is how often the lease watcher reads the lock from Redis.
const leaseEvery = 10 * time.Millisecond

// leaseWatcher reads one lock straight from the shared redis-server (not
// through the fault proxies) every 10 ms and keeps each holder's lease: when
// it started, and when Redis dropped it. The lock library stores the holder's
// metadata (the operator's holder name, cluster/namespace/name/uid) beside the
// lock with the same TTL, which tells whose lease it is.
type leaseWatcher struct {
	rdb       *redis.Client
	key, meta string
	slot      int

	mu      sync.Mutex
	leases  []lease
	cur     *lease    // the lease seen at the last observation
	expiry  time.Time // when the last observation said cur expires
	renewed time.Time // when cur was last seen renewed (or started)
}

// renewalSlack is how much later an expiry must be to count as a renewal rather than the jitter
// of two PTTL readings.
const renewalSlack = 20 * time.Millisecond

// watchLeases starts watching the first permits slots of the lock of scope Cluster named lock until
// ctx ends: a lock of one permit is its slot 0.
func watchLeases(ctx context.Context, addr, lock string, permits int) leaseWatchers {
	ws := make(leaseWatchers, 0, permits)
	for slot := range max(permits, 1) {
		ws = append(ws, watchLease(ctx, addr, lock, slot))
	}
	return ws
}

// leaseWatchers watch the slots of one lock.
type leaseWatchers []*leaseWatcher

// all returns the leases seen in every slot.
func (ws leaseWatchers) all() []lease {
	var out []lease
	for _, w := range ws {
		out = append(out, w.all()...)
	}
	return out
}

// slotKey is the Redis key of one slot of the lock of scope Cluster named lock: slot 0 is the
// lock's own key, slot i the key with ":s<i>" after it (internal/redislock/slots.lua).
func slotKey(lock string, slot int) string {
	key := keyPrefix + "{cluster/" + lock + "}"
	if slot > 0 {
		key += ":s" + strconv.Itoa(slot)
	}
	return key
}

// watchLease starts watching one slot of the lock of scope Cluster named lock until ctx ends.
func watchLease(ctx context.Context, addr, lock string, slot int) *leaseWatcher {
	key := slotKey(lock, slot)
	w := &leaseWatcher{key: key, meta: key + ":meta", slot: slot,
		rdb: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond,
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})}
	go func() {
		defer func() { _ = w.rdb.Close() }()
		for ctx.Err() == nil {
			w.observe(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(leaseEvery):
			}
		}
	}()
	return w
}

// observe reads the lock's holder and remaining time in one transaction. A
// read that fails (Redis paused or restarting) says nothing: the lease is
// judged by the expiry the last answer promised.
func (w *leaseWatcher) observe(ctx context.Context) {
	var meta *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.Get(ctx, w.meta)
		pttl = p.PTTL(ctx, w.key)
		return nil
	})
	now := time.Now()
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	holderName, ttl := "", pttl.Val()
	if ttl > 0 && meta.Err() == nil {
		holderName = holderOf(meta.Val())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil && w.cur.Holder != holderName {
		w.cur.End = minTime(w.expiry, now)
		w.leases = append(w.leases, *w.cur)
		w.cur = nil
	}
	if holderName == "" {
		return
	}
	expiry := now.Add(ttl)
	switch {
	case w.cur == nil:
		w.cur = &lease{Holder: holderName, Slot: w.slot, Start: now, LeastLeft: ttl}
		w.renewed = now
	case expiry.After(w.expiry.Add(renewalSlack)):
		w.cur.LongestGap = max(w.cur.LongestGap, now.Sub(w.renewed))
		w.renewed = now
	}
	w.cur.LeastLeft = min(w.cur.LeastLeft, ttl)
	w.expiry = expiry
}

// all returns the leases seen; one still held keeps a zero End.
func (w *leaseWatcher) all() []lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]lease(nil), w.leases...)
	if w.cur != nil {
		l := *w.cur
		l.End = time.Time{}
		out = append(out, l)
	}
	return out
}

// queuedHolders reads who waits in the queue of the lock of scope Cluster named lock, straight from
// the Redis it lives in (run.lockRedis): every waiter, as holderOf names it (the queue's members are the holder
// names, internal/redislock/queue.lua).
func queuedHolders(ctx context.Context, rdb redis.Cmdable, lock string) ([]string, error) {
	members, err := rdb.ZRange(ctx, slotKey(lock, 0)+":queue", 0, -1).Result()
	if err != nil {
		return nil, err
	}
	for i, m := range members {
		members[i] = holderOf(m)
	}
	return members, nil
}
