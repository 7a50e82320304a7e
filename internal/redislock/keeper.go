package redislock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	defaultKeeperBatch   = 1000
	defaultKeeperTimeout = 5 * time.Second
)

// KeeperOptions configures a Keeper. The zero value is usable.
type KeeperOptions struct {
	// OnLost is called once for each lock the keeper finds lost: gone or taken in Redis
	// (ErrLockLost), or not renewable in time because Redis did not answer (ErrLockLost wrapping
	// the transport error). The keeper stops renewing the lock first. It runs on the keeper's
	// goroutine: hand the work off, don't block.
	OnLost func(l *Lock, err error)
	// OnRenew is called after each renewal attempt that did not lose the lock, with nil on success
	// or the transport error that will be retried. For metrics; same rules as OnLost.
	OnRenew func(l *Lock, err error)
	// BatchSize caps the renewals sent in one pipeline (default 1000).
	BatchSize int
	// Timeout bounds one round of renewals (default 5s, and never longer than the shortest renew
	// interval in the round).
	Timeout time.Duration
}

// Keeper renews held locks on schedule from a single goroutine. Locks that fall due together go to
// each Redis node in one pipeline, so the cost per renewal is a fraction of a round trip and does
// not grow a goroutine per lock. Create it with Client.NewKeeper and Stop it when done; it never
// releases locks itself.
type Keeper struct {
	c    *Client
	opts KeeperOptions

	mu      sync.Mutex
	entries map[*Lock]*keeperEntry
	queue   keeperQueue

	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
	stop    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
}

type keeperEntry struct {
	lock     *Lock
	interval time.Duration
	due      time.Time
	index    int // position in the queue, -1 while a renewal is in flight
}

// NewKeeper starts a keeper for locks obtained from c.
func (c *Client) NewKeeper(opts KeeperOptions) *Keeper {
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultKeeperBatch
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultKeeperTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Keeper{
		c:       c,
		opts:    opts,
		entries: make(map[*Lock]*keeperEntry),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	go k.run()
	return k
}

// Add starts renewing l every interval (0 means a third of its lease). The interval must be
// shorter than the lease. Adding a lock twice updates its interval.
func (k *Keeper) Add(l *Lock, interval time.Duration) error {
	if l == nil || l.state.Load() != stateHeld {
		return ErrNotHeld
	}
	if l.client != k.c {
		return invalidf("lock %s belongs to another client", l.key)
	}
	ttl := l.LeaseTTL()
	if interval == 0 {
		interval = ttl / 3
	}
	if interval <= 0 || interval >= ttl {
		return invalidf("renew interval %v for lock %s: must be positive and shorter than the lease %v", interval, l.key, ttl)
	}
	// Schedule from the lock's last grant, not from now, so a lock that was obtained a while ago
	// (or re-adopted) is renewed in time.
	due := l.GrantedAt().Add(interval)

	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.stopped:
		return errors.New("redislock: keeper stopped")
	default:
	}
	if e, ok := k.entries[l]; ok {
		e.interval = interval
		if e.index >= 0 {
			e.due = due
			heap.Fix(&k.queue, e.index)
		}
	} else {
		e := &keeperEntry{lock: l, interval: interval, due: due}
		k.entries[l] = e
		heap.Push(&k.queue, e)
	}
	k.poke()
	return nil
}

// Remove stops renewing l. It reports whether l was being renewed. Remove the lock before
// releasing it, or a renewal in flight may find it gone and report it lost.
func (k *Keeper) Remove(l *Lock) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.entries[l]
	if !ok {
		return false
	}
	delete(k.entries, l)
	if e.index >= 0 {
		heap.Remove(&k.queue, e.index)
	}
	return true
}

// Len returns the number of locks being renewed.
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

// Stop stops renewing and waits for a round in flight to end. The locks stay in Redis until they
// expire or are released.
func (k *Keeper) Stop() {
	k.stop.Do(func() {
		k.mu.Lock()
		close(k.stopped)
		k.mu.Unlock()
		k.cancel()
	})
	<-k.done
}

func (k *Keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *Keeper) run() {
	defer close(k.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := k.untilNextDue()
		timer.Reset(wait)
		select {
		case <-k.stopped:
			return
		case <-k.wake:
			continue
		case <-timer.C:
		}
		for batch := k.takeDue(); len(batch) > 0; batch = k.takeDue() {
			k.renew(batch)
		}
	}
}

func (k *Keeper) untilNextDue() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.queue) == 0 {
		return time.Hour
	}
	return max(k.queue[0].due.Sub(k.c.now()), 0)
}

// takeDue pops up to BatchSize locks that are due. A lock due within an eighth of its interval goes
// along too: renewing a little early costs nothing and folds near-simultaneous locks into one
// pipeline.
func (k *Keeper) takeDue() []*keeperEntry {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.c.now()
	var batch []*keeperEntry
	for len(k.queue) > 0 && len(batch) < k.opts.BatchSize {
		e := k.queue[0]
		if e.due.Sub(now) > e.interval/8 {
			break
		}
		heap.Pop(&k.queue)
		batch = append(batch, e)
	}
	return batch
}

// renew refreshes one batch and reschedules or drops each lock by its outcome.
func (k *Keeper) renew(batch []*keeperEntry) {
	timeout := k.opts.Timeout
	locks := make([]*Lock, 0, len(batch))
	for _, e := range batch {
		timeout = min(timeout, e.interval)
		locks = append(locks, e.lock)
	}
	ctx, cancel := context.WithTimeout(k.ctx, timeout)
	defer cancel()

	// Leases are read once: a lock's lease changes only through Refresh, and a renewal must be judged
	// by the lease it asked for.
	ttls := make([]time.Duration, len(locks))
	for i, l := range locks {
		ttls[i] = l.LeaseTTL()
	}
	start := k.c.now()
	tallies := k.c.refreshPipelined(ctx, locks, ttls)
	now := k.c.now()

	var lost, renewed []*keeperEntry
	var lostErrs, renewErrs []error
	k.mu.Lock()
	for i, e := range batch {
		if k.entries[e.lock] != e {
			continue // removed while in flight
		}
		if e.lock.state.Load() != stateHeld {
			delete(k.entries, e.lock)
			continue
		}
		err := e.lock.settleRefresh(tallies[i], start, now, ttls[i])
		switch {
		case err == nil:
			e.due = start.Add(e.interval)
		case errors.Is(err, ErrLockLost):
		default:
			validUntil := e.lock.ValidUntil()
			if left := validUntil.Sub(now); left > 0 {
				// Transport trouble: try again soon, well before the lease runs out.
				e.due = now.Add(max(min(e.interval/4, left/2), time.Millisecond))
				break
			}
			e.lock.markLost()
			err = fmt.Errorf("%w: renewal failed until the lease ran out: %w", ErrLockLost, err)
		}
		if errors.Is(err, ErrLockLost) {
			delete(k.entries, e.lock)
			lost = append(lost, e)
			lostErrs = append(lostErrs, err)
			continue
		}
		heap.Push(&k.queue, e)
		renewed = append(renewed, e)
		renewErrs = append(renewErrs, err)
	}
	k.mu.Unlock()

	// Callbacks run outside the mutex, so they may call Add or Remove.
	if k.opts.OnRenew != nil {
		for i, e := range renewed {
			k.opts.OnRenew(e.lock, renewErrs[i])
		}
	}
	if k.opts.OnLost != nil {
		for i, e := range lost {
			k.opts.OnLost(e.lock, lostErrs[i])
		}
	}
}

// refreshPipelined sends a refresh for every lock to every node, one pipeline per node, and tallies
// the answers per lock.
func (c *Client) refreshPipelined(ctx context.Context, locks []*Lock, ttls []time.Duration) []tally {
	perNode := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return refreshPipeline(ctx, n, locks, ttls)
	})
	tallies := make([]tally, len(locks))
	for node, r := range perNode {
		results, _ := r.val.([]nodeReply)
		for i := range locks {
			switch {
			case r.err != nil:
				tallies[i].errs = append(tallies[i].errs, r.err)
			case results[i].err != nil:
				tallies[i].errs = append(tallies[i].errs, &NodeError{Node: node, Addr: nodeAddr(c.nodes[node]), Err: results[i].err})
			case results[i].val == int64(1):
				tallies[i].ok++
			default:
				tallies[i].no++
			}
		}
	}
	return tallies
}

// refreshPipeline runs refresh.lua for each lock in one pipeline on one node. EVALSHA in a pipeline
// cannot fall back to EVAL per command, so a server that lost its script cache (a restart) gets the
// script loaded and the pipeline sent once more.
func refreshPipeline(ctx context.Context, n redis.UniversalClient, locks []*Lock, ttls []time.Duration) ([]nodeReply, error) {
	for attempt := 0; ; attempt++ {
		cmds, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, l := range locks {
				scriptRefresh.EvalSha(ctx, p, l.keys.lockMeta(), l.token, ttls[i].Milliseconds())
			}
			return nil
		})
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if lerr := scriptRefresh.Load(ctx, n).Err(); lerr != nil {
				return nil, fmt.Errorf("load refresh script: %w", lerr)
			}
			continue
		}
		if len(cmds) != len(locks) {
			if err == nil {
				err = fmt.Errorf("pipeline returned %d replies for %d commands", len(cmds), len(locks))
			}
			return nil, err
		}
		out := make([]nodeReply, len(locks))
		for i, cmd := range cmds {
			v, err := cmd.(*redis.Cmd).Int64()
			out[i] = nodeReply{val: v, err: err}
		}
		return out, nil
	}
}

// keeperQueue is a min-heap of entries by due time.
type keeperQueue []*keeperEntry

func (q keeperQueue) Len() int           { return len(q) }
func (q keeperQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q keeperQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *keeperQueue) Push(x any) {
	e := x.(*keeperEntry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *keeperQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
