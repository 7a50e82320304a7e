package redislock

import (
	"errors"
	"fmt"
	"time"
)

var (
	// errUnanswered stands for the transport error of a renewal that has not come back yet.
	errUnanswered = errors.New("renewal not answered yet")
	// errNotSent stands for it when the renewal is due but waits for an earlier round to end.
	errNotSent = errors.New("renewal due but not sent yet: the keeper's rounds are all waiting for Redis")
)

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

// watchTime is when the entry's validity must be looked at next: when it may be at risk (atRiskFrom)
// until OnAtRisk was called, then its end. A healthy lock is renewed before its margin starts, so
// its watch never fires and a renewal moves it once.
func (e *keeperEntry) watchTime(vu time.Time) time.Time {
	if e.warned {
		return vu
	}
	return e.atRiskFrom(vu)
}

// atRiskFrom is when an overdue renewal makes the entry's lock at risk: the start of its at-risk
// margin, or for a lock added inside it, once its first renewal has had its time (lateUntil).
func (e *keeperEntry) atRiskFrom(vu time.Time) time.Time {
	from := vu.Add(-e.margin)
	if e.lateUntil.After(from) {
		return e.lateUntil
	}
	return from
}

// lateUntil is how long the first renewal of a lock added at now, valid until vu, is awaited before
// the lock counts as at risk: zero for a lock added before its margin, else half of what is left of
// its validity. Such a lock's acquire was answered late: a call that waited on a dead connection
// and that the Redis client then sent again elsewhere (a Sentinel failover) counts its lease from
// the first send. Nothing has renewed it yet, so no renewal is overdue; reported at once, it would
// stop a Job that had not even started (seen in the fault suite's Sentinel split brain). Half is
// for the renewal's answer, the other half for stopping the work if none comes; a renewal that
// fails ends the wait at once.
func lateUntil(now, vu time.Time, margin time.Duration) time.Time {
	if now.Before(vu.Add(-margin)) {
		return time.Time{}
	}
	return now.Add(vu.Sub(now) / 2)
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
		case !now.Before(e.atRiskFrom(vu)) && !e.warned:
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
