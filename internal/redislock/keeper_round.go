package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

const (
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
)

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
		e.lateUntil = time.Time{} // the first renewal has come back: from now on, by the margin
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
