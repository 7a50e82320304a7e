package redislock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

const (
	defaultKeeperBatch   = 1000
	defaultKeeperTimeout = 5 * time.Second

	// MinRenewInterval is the shortest renew interval a Keeper uses; Add raises shorter ones to it
	// (and to a hundredth of the lease). A lock renewed more often buys no safety and, batched with
	// other tenants' locks, would only load Redis and the keeper on their account.
	MinRenewInterval = 100 * time.Millisecond

	// roundShare is the share of the most urgent lock's remaining validity that one round may wait
	// for its answer. Waiting long keeps a slow but live connection: go-redis discards a connection
	// whose read timed out, and a fresh one costs two more round trips before the renewal is even
	// sent. The rest of the validity is left for one retry on a new connection, for a connection
	// that died silently.
	roundShare = 0.75

	// maxRounds bounds the rounds in flight at once. Rounds run one at a time while Redis answers
	// promptly; once the latest has waited MinRenewInterval, locks falling due go out in another,
	// on another connection, so one dead or slow connection does not hold back everyone's renewals.
	maxRounds = 4

	// rttSamples is how many of its latest rounds the keeper's round-trip estimate looks at. Few
	// enough that the estimate follows a change of latency within a few rounds, and an array small
	// enough to scan on every round.
	rttSamples = 16

	// timerSlack is what a renewal's budget allows for the keeper's own lateness: a timer that fires
	// late, a goroutine that waits for a core on a loaded machine.
	timerSlack = 10 * time.Millisecond
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
	// at ValidUntil if none comes.
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
	// short: OnShortLease was called for this lock.
	short bool
}

var (
	// errUnanswered stands for the transport error of a renewal that has not come back yet.
	errUnanswered = errors.New("renewal not answered yet")
	// errNotSent stands for it when the renewal is due but waits for an earlier round to end.
	errNotSent = errors.New("renewal due but not sent yet: the keeper's rounds are all waiting for Redis")

	// ErrLeaseTooShort is what KeeperOptions.OnShortLease reports: the lease leaves too little time
	// before its at-risk margin for renewals at the round trips the keeper measures.
	ErrLeaseTooShort = errors.New("redislock: lease too short for the round trip to Redis")
)

// rttWindow keeps the durations of the keeper's latest rounds. Its estimate is the longest of them:
// of 16 samples the 99th percentile is the largest, and a schedule that must not be late has
// nothing better to rely on. A slot not yet filled counts as zero.
type rttWindow struct {
	samples [rttSamples]time.Duration
	next    int
	max     time.Duration
}

func (w *rttWindow) add(d time.Duration) {
	w.samples[w.next] = d
	w.next = (w.next + 1) % len(w.samples)
	w.max = 0
	for _, s := range w.samples {
		w.max = max(w.max, s)
	}
}

// renewBudget is how long before the at-risk margin a renewal goes out, for round trips of rtt:
// the round trip, a quarter more for the jitter that 16 samples do not show, and the keeper's own
// lateness.
func renewBudget(rtt time.Duration) time.Duration {
	return rtt + rtt/4 + timerSlack
}

// minInterval is the shortest renew interval, and the shortest time between a lease's start and its
// next renewal, for a lease of ttl: one lock must not make the keeper spin on everyone's account.
func minInterval(ttl time.Duration) time.Duration {
	return max(MinRenewInterval, ttl/100)
}

// leaseNeeds is how much of a lease, beyond its drift allowance and at-risk margin, round trips of
// rtt take in the worst case the keeper plans for: the round trip that brought the lease (it counts
// from when its acquire or renew was sent), then a renewal on a fresh connection, whose handshake
// (HELLO) is one more round trip before the renewal's own. A renewal on a warm connection needs
// less (renewBudget), so a lease that holds this much also leaves the schedule its slack.
func leaseNeeds(rtt time.Duration) time.Duration {
	return 3*rtt + timerSlack
}

// leaseTooShort reports whether a lease of ttl, with drift and margin taken off, cannot hold what
// round trips of rtt need (leaseNeeds).
func leaseTooShort(ttl, drift, margin, rtt time.Duration) bool {
	return ttl-drift-margin < leaseNeeds(rtt)
}

// MinTTL returns the shortest lease a Keeper keeps clear of its at-risk margin, at the default
// renew interval and margin (a third of the lease each), when a round trip to Redis takes rtt:
//
//	ttl·(1 − driftFactor − 1/3) − driftAdd ≥ 3·rtt + 10ms
//
// The three round trips are the one that brought the lease (it counts from when its acquire or
// renew was sent), then a renewal that may have to open a connection: HELLO, then the renewal. With
// the default drift allowance that is about 4.57·rtt + 15ms: 2.76s for 600ms round trips. That is
// for a client whose fresh connection costs one round trip before its first command (HELLO:
// DisableIdentity, database 0, the connection dialled nearby or ahead); every further round trip of
// a connection's setup (CLIENT SETINFO, SELECT, TCP or TLS handshakes over the slow path) adds one
// rtt to the three. Keeper.RoundTrip is the keeper's measure of rtt. The bound is exact for leases
// of 300ms and more, and errs long below.
func (c *Client) MinTTL(rtt time.Duration) time.Duration {
	need := float64(leaseNeeds(rtt)+c.driftAdd) / (1 - c.driftFactor - 1.0/3)
	return time.Duration(math.Ceil(need/float64(time.Millisecond))) * time.Millisecond // what Redis keeps
}

// RoundTrip returns the keeper's estimate of a round's duration, from sending its renewals to
// settling their answers: the longest of its latest 16 rounds that every node answered, leaving
// out rounds that may have opened a connection (see Keeper). Zero until it has measured one.
func (k *Keeper) RoundTrip() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rtt.max
}

// failure is the error that explains a run of failures.
func (e *keeperEntry) failure() error {
	switch {
	case e.lastErr != nil:
		return e.lastErr
	case e.outstanding:
		return errUnanswered
	default:
		return errNotSent
	}
}

// watchTime is when the entry's validity must be looked at next: the start of its at-risk margin
// until OnAtRisk was called, then its end. A healthy lock is renewed before its margin starts, so
// its watch never fires and a renewal moves it once.
func (e *keeperEntry) watchTime(vu time.Time) time.Time {
	if e.warned {
		return vu
	}
	return vu.Add(-e.margin)
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

// callback is one call of an OnXxx option, made after the keeper's mutex is released.
type callback struct {
	fn  func(*Lock, error)
	l   *Lock
	err error
}

func (k *Keeper) call(calls []callback) {
	for _, c := range calls {
		if c.fn != nil {
			c.fn(c.l, c.err)
		}
	}
}

// run is the keeper goroutine: it looks at validities when they are due, starts rounds for locks
// that are due, and settles each round when it comes back.
func (k *Keeper) run() {
	defer close(k.done)
	defer k.rounds.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var f flight
	for {
		// A round that came back while the timer fired is settled first: its answer may save a
		// lock whose validity the watch is about to end.
		select {
		case r := <-k.results:
			f.inFlight--
			k.call(k.settle(r))
		default:
		}
		now := time.Now()
		k.mu.Lock()
		calls := k.watchLocked(now, nil)
		if f.mayStart(now) {
			var r round
			var ok bool
			if r, calls, ok = k.startRoundLocked(now, f.inFlight+1, calls); ok {
				f.inFlight++
				f.lastStart = now
				k.rounds.Go(func() { k.results <- k.renew(r) })
			}
		}
		wait := k.nextWakeLocked(now, f)
		k.mu.Unlock()
		k.call(calls)

		timer.Reset(wait)
		select {
		case <-k.stopped:
			return
		case <-k.wake:
		case <-timer.C:
		case r := <-k.results:
			f.inFlight--
			k.call(k.settle(r))
		}
	}
}

// flight is what the keeper goroutine knows of its rounds in flight.
type flight struct {
	inFlight  int
	lastStart time.Time
}

// startsAt is the earliest instant another round may start: at once when none is in flight, once
// the latest has waited MinRenewInterval when some are, never when maxRounds are.
func (f flight) startsAt() (time.Time, bool) {
	switch {
	case f.inFlight == 0:
		return time.Time{}, true
	case f.inFlight < maxRounds:
		return f.lastStart.Add(MinRenewInterval), true
	default:
		return time.Time{}, false
	}
}

func (f flight) mayStart(now time.Time) bool {
	at, ok := f.startsAt()
	return ok && !now.Before(at)
}

func (k *Keeper) nextWakeLocked(now time.Time, f flight) time.Duration {
	wait := time.Hour
	if e := k.watch.top(); e != nil {
		wait = min(wait, e.watchAt.Sub(now))
	}
	if at, ok := f.startsAt(); ok && k.due.top() != nil {
		if due := k.due.top().due; due.After(at) {
			at = due
		}
		wait = min(wait, at.Sub(now))
	}
	return max(wait, 0)
}

// watchLocked acts on every entry whose watch time has come: a lock past its validity is lost,
// an overdue one inside its margin is at risk.
func (k *Keeper) watchLocked(now time.Time, calls []callback) []callback {
	for e := k.watch.top(); e != nil && !e.watchAt.After(now); e = k.watch.top() {
		if e.lock.state.Load() != stateHeld {
			k.dropLocked(e) // released or found lost elsewhere: nothing to report
			continue
		}
		vu := e.lock.ValidUntil()
		switch {
		case !now.Before(vu):
			e.lock.markLost()
			k.dropLocked(e)
			err := fmt.Errorf("%w: not renewed within its validity: %w", ErrLockLost, e.failure())
			calls = append(calls, callback{k.opts.OnLost, e.lock, err})
			continue
		case !now.Before(vu.Add(-e.margin)) && !e.warned:
			if !e.outstanding && now.Before(e.due) {
				// Inside the margin, but the renewal is not even due (a lease too short for its
				// margin and the shortest interval, see dueAfter): look again when it is.
				e.watchAt = minTime(e.due, vu)
				k.watch.set(e)
				continue
			}
			e.warned = true
			calls = append(calls, callback{k.opts.OnAtRisk, e.lock, e.failure()})
		}
		e.watchAt = e.watchTime(vu)
		k.watch.set(e)
	}
	return calls
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// round is one batch of renewals on its way to Redis.
type round struct {
	batch  []*keeperEntry
	locks  []*Lock
	ttls   []time.Duration
	budget time.Duration
	// conns is how many rounds were in flight when this one started, itself included; cold says
	// more than the keeper's open connections (Keeper.conns), so this one may have opened one.
	conns int
	cold  bool
}

type roundResult struct {
	round
	start, end time.Time
	tallies    []tally
}

// startRoundLocked picks up to BatchSize locks that are due and prepares their round, the conns-th
// in flight. A lock due within an eighth of its interval goes along too: renewing a little early
// costs nothing and folds near-simultaneous locks into one pipeline. A lock whose lease is too short
// for the keeper's round trips is reported to OnShortLease (appended to calls) before its renewal
// goes out, whether or not that renewal comes back.
func (k *Keeper) startRoundLocked(now time.Time, conns int, calls []callback) (round, []callback, bool) {
	var r round
	urgent := time.Time{}
	for e := k.due.top(); e != nil && len(r.batch) < k.opts.BatchSize; e = k.due.top() {
		if e.due.Sub(now) > e.interval/8 {
			break
		}
		// Leases are read once: a lock's lease changes only through Renew, and a renewal must be
		// judged by the lease it asked for.
		ttl, vu := e.lock.lease()
		if vu.IsZero() {
			k.dropLocked(e) // released without Remove, or lost: nothing to renew or report
			continue
		}
		k.due.remove(e)
		e.outstanding = true
		if w := e.watchTime(vu); !w.Equal(e.watchAt) {
			e.watchAt = w
			k.watch.set(e)
		}
		if !e.short && k.rtt.max > 0 && leaseTooShort(ttl, k.c.drift(ttl), e.margin, k.rtt.max) {
			e.short = true
			calls = append(calls, callback{k.opts.OnShortLease, e.lock, k.shortLease(e, ttl)})
		}
		r.batch, r.locks, r.ttls = append(r.batch, e), append(r.locks, e.lock), append(r.ttls, ttl)
		if urgent.IsZero() || vu.Before(urgent) {
			urgent = vu
		}
	}
	if len(r.batch) == 0 {
		return r, calls, false
	}
	// Budget by the lease, not by anyone's interval: a lock with a tiny interval must not shrink
	// the wait of the locks batched with it.
	r.budget = max(min(time.Duration(float64(urgent.Sub(now))*roundShare), k.opts.Timeout), MinRenewInterval)
	r.conns, r.cold = conns, conns > k.conns
	return r, calls, true
}

// renew sends one round; it runs on its own goroutine and touches no keeper state.
func (k *Keeper) renew(r round) roundResult {
	ctx, cancel := context.WithTimeout(k.ctx, r.budget)
	defer cancel()
	start := time.Now()
	tallies := k.c.renewPipelined(ctx, r.locks, r.ttls)
	return roundResult{round: r, start: start, end: time.Now(), tallies: tallies}
}

// measure takes what a finished round says about the way to Redis: how many connections the
// keeper's rounds have open, and how long a round takes. Only rounds that every node answered count,
// and not those that may have opened a connection: a handshake is paid once per connection, not per
// round, and a lock added while no connection is known open goes out at once (Add) instead of being
// budgeted for it. A transport error counts every connection lost, which at worst renews a few
// locks early.
func (k *Keeper) measure(r roundResult) {
	for _, t := range r.tallies {
		if len(t.errs) > 0 {
			k.conns = 0
			return
		}
	}
	if !r.cold {
		k.rtt.add(r.end.Sub(r.start))
	}
	k.conns = max(k.conns, r.conns)
}

// dueAfter is when the renewal of a lease that began at start and is valid until vu goes out: at
// the lock's interval, or earlier when an answer as slow as the keeper's recent rounds would then
// come inside the at-risk margin; never sooner than the shortest interval after start, so a lease
// too short for the round trip (OnShortLease) does not make the keeper spin.
func (k *Keeper) dueAfter(e *keeperEntry, start time.Time, ttl time.Duration, vu time.Time) time.Time {
	due := start.Add(e.interval)
	if latest := vu.Add(-e.margin - renewBudget(k.rtt.max)); latest.Before(due) {
		due = latest
		if floor := start.Add(minInterval(ttl)); due.Before(floor) {
			due = floor
		}
	}
	return due
}

// shortLease is the error OnShortLease gets for e's lease of ttl.
func (k *Keeper) shortLease(e *keeperEntry, ttl time.Duration) error {
	rtt := k.rtt.max
	left := ttl - k.c.drift(ttl) - e.margin
	return fmt.Errorf("%w: lock %s: a lease of %v leaves %v before its at-risk margin of %v, and round trips of %v need %v (the one that brought the lease, then a renewal on a fresh connection); at the default margin the lease needs %v",
		ErrLeaseTooShort, e.lock.key, ttl, left.Round(time.Millisecond), e.margin.Round(time.Millisecond),
		rtt.Round(time.Millisecond), leaseNeeds(rtt).Round(time.Millisecond), k.c.MinTTL(rtt))
}

// settle reschedules or drops each lock of a finished round by its outcome.
func (k *Keeper) settle(r roundResult) []callback {
	calls := make([]callback, 0, len(r.batch))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.measure(r)
	for i, e := range r.batch {
		if k.entries[e.lock] != e {
			continue // removed, or reported lost at ValidUntil, while in flight
		}
		if e.lock.state.Load() != stateHeld {
			k.dropLocked(e)
			continue
		}
		err := e.lock.settleRenew(r.tallies[i], r.start, r.end, r.ttls[i])
		_, vu := e.lock.lease()
		switch {
		case err == nil:
			e.outstanding, e.warned, e.lastErr = false, false, nil
			e.due = k.dueAfter(e, r.start, r.ttls[i], vu)
		case errors.Is(err, ErrLockLost):
		default:
			left := vu.Sub(r.end)
			if left <= 0 {
				e.lock.markLost()
				err = fmt.Errorf("%w: renewal failed until the lease ran out: %w", ErrLockLost, err)
				break
			}
			// Transport trouble: try again soon, well before the lease runs out.
			e.lastErr = err
			e.due = r.end.Add(max(min(e.interval/4, left/4), time.Millisecond))
		}
		if errors.Is(err, ErrLockLost) {
			k.dropLocked(e)
			calls = append(calls, callback{k.opts.OnLost, e.lock, err})
			continue
		}
		k.due.set(e)
		e.watchAt = e.watchTime(vu)
		k.watch.set(e)
		calls = append(calls, callback{k.opts.OnRenew, e.lock, err})
	}
	return calls
}
