package redislock

import (
	"context"
	"errors"
	"sync"
	"time"
)

const (
	defaultKeeperBatch   = 1000
	defaultKeeperTimeout = 5 * time.Second
)

// KeeperOptions configures a Keeper. The zero value is usable.
//
// The callbacks run one at a time on the keeper's goroutine, which also renews every other lock
// and times every loss: they must return at once (hand the work to another goroutine or a
// buffered channel). They may call Add and Remove.
type KeeperOptions struct {
	// OnLost is called once for each lock the keeper finds lost: gone or held by another in Redis
	// (ErrLockLost), or not renewed before its validity ended because Redis did not answer in time
	// (ErrLockLost wrapping the last transport error). It is called at ValidUntil even while a
	// renewal is still waiting for its answer, not when that renewal gives up. The keeper stops
	// renewing the lock first.
	OnLost func(l *Lock, err error)
	// OnAtRisk is called once per run of failed renewals of a lock, when a renewal of its current
	// lease is overdue (it failed, it is still unanswered, or it waits behind a round that is) and
	// less than AtRiskMargin of its validity is left. err is the last transport error, or one
	// saying why there is none yet. It is the time to stop the work the lock protects, before Redis may
	// expire the key; a later successful renewal (OnRenew with nil) ends the run, and OnLost follows
	// at ValidUntil if none comes. A lock added with less than AtRiskMargin left (its acquire was
	// answered late) is renewed at once, and that renewal is awaited for half of what is left before
	// the lock counts as at risk, unless it fails sooner.
	OnAtRisk func(l *Lock, err error)
	// AtRiskMargin is how long before a lock's validity ends OnAtRisk is called. Default: a third of
	// the lock's lease, but at most half of the time between its scheduled renewal and the end of
	// its lease. The keeper sends each renewal early enough that an answer as slow as its recent
	// rounds arrives before the margin starts, so a longer margin makes it renew sooner; a margin
	// that leaves less of the lease than three such round trips makes OnShortLease report the lock.
	AtRiskMargin time.Duration
	// OnRenew is called after each renewal attempt that did not lose the lock, with nil on success
	// or the transport error that will be retried. For metrics.
	OnRenew func(l *Lock, err error)
	// OnShortLease is called once for a lock whose lease is too short for the round trips the
	// keeper measures (RoundTrip): the lease minus the drift allowance and the at-risk margin holds
	// less than three of them (see Client.MinTTL), so a renewal may be answered after the margin
	// started, and OnAtRisk stop work that nothing threatens. err wraps ErrLeaseTooShort and gives
	// the numbers. The keeper goes on renewing the lock; the remedy is a longer lease, a shorter
	// margin, or a Redis nearer by. It is checked before each renewal goes out, once the keeper has
	// measured a round.
	OnShortLease func(l *Lock, err error)
	// BatchSize caps the renewals sent in one pipeline (default 1000).
	BatchSize int
	// Timeout caps how long one round of renewals waits for Redis (default 5s). Within the cap a
	// round waits for three quarters of the remaining validity of its most urgent lock, and never
	// less than MinRenewInterval.
	Timeout time.Duration
}

// Keeper renews held locks on schedule from one goroutine. Locks that fall due together go to
// each Redis node in one pipeline, so the cost per renewal is a fraction of a round trip and does
// not grow a goroutine per lock. Create it with Client.NewKeeper and Stop it when done; it never
// releases locks itself.
//
// Each round of renewals runs on a goroutine of its own: one at a time while Redis answers
// promptly, up to four at once when the latest has waited longer than MinRenewInterval, so a round
// stuck on a dead connection does not hold back the other locks. The keeper goroutine keeps time
// meanwhile: a lock whose validity ends is reported lost at that instant, whatever its round is
// waiting for, and one whose renewal is overdue is reported at risk some margin before.
//
// Each renewal is scheduled from its lease's end, not only from its start: it goes out at the
// lock's interval, or earlier if an answer as slow as the keeper's recent rounds would otherwise
// arrive inside the at-risk margin (see RoundTrip). The lease counts from when its acquire or
// renew was sent, so the round trip that brought it is already spent when the keeper gets it.
//
// A round waits for its answer as long as the validity of its most urgent lock allows (see
// KeeperOptions.Timeout) rather than abandoning a slow connection: under high latency a fresh
// go-redis connection costs one or two extra round trips (HELLO, and CLIENT SETINFO unless
// DisableIdentity) before the renewal. go-redis opens pipeline connections, which the keeper's
// rounds use, only when a pipeline needs one, and runs the handshake on first use even for the
// idle connections MinIdleConns keeps: the keeper cannot measure that cost in advance, so until
// one of its rounds has come back, and again after a round failed in transport (which discards
// its connection), a lock it is given is renewed at once rather than at its interval. Give the
// keeper's Redis client ContextTimeoutEnabled (or a round can outlive its budget by the client's
// ReadTimeout) and DisableIdentity, which saves one of those round trips.
type Keeper struct {
	c    *Client
	opts KeeperOptions

	mu      sync.Mutex
	entries map[*Lock]*keeperEntry
	due     entryHeap // entries waiting for their next renewal, by due time
	watch   entryHeap // every entry, by the next instant its validity must be looked at

	// rtt holds the durations of the latest rounds, for the schedule. conns is how many rounds at
	// once have come back without a transport error since the last one that had one: that many
	// connections are open with their handshake paid, and a round beyond them may open one.
	rtt   rttWindow
	conns int

	wake    chan struct{}
	results chan roundResult // capacity maxRounds, so a round never blocks sending
	stopped chan struct{}
	done    chan struct{}
	stop    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
	rounds  sync.WaitGroup
}

type keeperEntry struct {
	lock     *Lock
	interval time.Duration
	margin   time.Duration // at-risk margin
	due      time.Time
	dueIndex int // position in Keeper.due, -1 while a renewal is in flight

	watchAt    time.Time
	watchIndex int // position in Keeper.watch

	// outstanding: a renewal of the current lease was sent and has not succeeded yet.
	outstanding bool
	// warned: OnAtRisk was called for this run of failures.
	warned  bool
	lastErr error // the last transport error of this run of failures
	// lateUntil: the lock came to the keeper already inside its margin (its acquire was answered
	// late), and until then its first renewal is awaited before the lock counts as at risk; zero
	// once a renewal has been settled.
	lateUntil time.Time
	// short: OnShortLease was called for this lock.
	short bool
}

// NewKeeper starts a keeper for locks acquired from c.
func (c *Client) NewKeeper(opts KeeperOptions) *Keeper {
	if opts.BatchSize <= 0 {
		opts.BatchSize = defaultKeeperBatch
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultKeeperTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	epoch := time.Now()
	k := &Keeper{
		c:       c,
		opts:    opts,
		entries: make(map[*Lock]*keeperEntry),
		due:     entryHeap{epoch: epoch},
		watch:   entryHeap{byWatch: true, epoch: epoch},
		wake:    make(chan struct{}, 1),
		results: make(chan roundResult, maxRounds),
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	go k.run()
	return k
}

// Add starts renewing l every interval (0 means a third of its lease). An interval below
// MinRenewInterval or a hundredth of the lease is raised to that floor; the interval must then be
// shorter than the lease. Adding a lock twice updates its interval.
func (k *Keeper) Add(l *Lock, interval time.Duration) error {
	if l == nil || l.state.Load() != stateHeld {
		return ErrNotHeld
	}
	if l.client != k.c {
		return invalidf("lock %s belongs to another client", l.key)
	}
	ttl := l.LeaseTTL()
	if interval < 0 {
		return invalidf("renew interval %v for lock %s: must not be negative", interval, l.key)
	}
	if interval == 0 {
		interval = ttl / 3
	}
	interval = max(interval, minInterval(ttl))
	if interval >= ttl {
		return invalidf("renew interval %v for lock %s (at least %v): must be shorter than the lease %v", interval, l.key, MinRenewInterval, ttl)
	}
	margin := k.opts.AtRiskMargin
	if margin <= 0 {
		margin = min(ttl/3, (ttl-interval)/2)
	}
	start, vu := l.LeaseStart(), l.ValidUntil()

	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.stopped:
		return errors.New("redislock: keeper stopped")
	default:
	}
	e, ok := k.entries[l]
	if !ok {
		e = &keeperEntry{lock: l, dueIndex: -1, watchIndex: -1}
		k.entries[l] = e
	}
	e.interval, e.margin = interval, margin
	// A lock in flight (out of the due heap) is rescheduled by its round's outcome.
	if !ok || e.dueIndex >= 0 {
		// Schedule from the lock's last acquire or renew (LeaseStart), not from now, so a lock that
		// was acquired a while ago (or re-adopted) is renewed in time. Without a round known to
		// have come back, the next one may pay for a fresh connection: renewing at once spends the
		// least of the lease on it.
		e.due = start
		if k.conns > 0 {
			e.due = k.dueAfter(e, start, ttl, vu)
		}
		k.due.set(e)
		e.lateUntil = lateUntil(time.Now(), vu, margin)
	}
	e.watchAt = e.watchTime(vu)
	k.watch.set(e)
	k.poke()
	return nil
}

// Remove stops renewing l. It reports whether l was being renewed. Remove the lock before
// releasing it, or a renewal in flight may find it gone and report it lost.
func (k *Keeper) Remove(l *Lock) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.entries[l]
	if ok {
		k.dropLocked(e)
	}
	return ok
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

func (k *Keeper) dropLocked(e *keeperEntry) {
	delete(k.entries, e.lock)
	k.due.remove(e)
	k.watch.remove(e)
}
