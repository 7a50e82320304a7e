package guard

import (
	"context"
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// What a guard reconciler does with the lock book for a guarded object: acquire in the queue every
// kind of the same lock waits in, re-adopt what its record says it holds while the book does not
// know it (a restart, a new leader), and release.
// The token is derived from the object's UID, so one call both picks up a lock that is still ours
// and tells when it is not, and a release works without the *Lock, after a restart.

// Holdings acquires, re-adopts and releases for one guard reconciler.
type Holdings struct {
	Locks   *lockbook.Book
	Permits locks.PermitReader
	Config  *Config
	// Waiting is the reconciler's wait book (see Asks and Wait); nil asks Redis at every pass.
	Waiting *waitbook.Book
}

// Readopt asks for the lock with the object's own token, outside the queue, and has the book renew
// what it gets; claim learns the permits it asked with. The same fence (and slot) continues the
// acquisition, and lost is nil. A lock granted afresh, or held by another, is lost (someone may
// have held it in between, so the object's work was not covered): lost says why, and a fresh lock
// is still returned and renewed, at risk, so it is released only once the work is stopped. When
// the object's own token released the recorded acquisition (the release mark: a deposed leader's
// pass or its successor's), released is true, the book records the release, and nothing is held.
func (ro Holdings) Readopt(ctx context.Context, claim *lockbook.Claim, c locks.Claimant, w lockbook.Workload, recordedFence int64) (lock *lockbook.Lock, lost error, released bool, err error) {
	permits, err := ro.Permits.Of(ctx, c)
	if err != nil {
		return nil, nil, false, err
	}
	if !ro.Locks.HandsOff() {
		permits = 1 // what a guarded object holds on Redlock is a plain lock
	}
	claim.Permits = permits
	rctx, cancel := context.WithTimeout(ctx, ro.Config.RedisTimeout)
	lock, err = ro.Locks.Readopt(rctx, *claim, TTLOf(c))
	cancel()
	if errors.Is(err, lockbook.ErrReleasedBefore) {
		ro.Locks.MarkReleased(w)
		ctrl.LoggerFrom(ctx).Info("Found the lock released under its recorded fence by an earlier pass", "lock", claim.Key, "fencingToken", recordedFence)
		return nil, nil, true, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		lost = fmt.Errorf("lock held by another holder while the operator was away: %w", lockbook.ErrLockLost)
		ro.Locks.MarkLost(w, lost)
		return nil, lost, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("re-adopt %s: %w", claim.Key, err)
	}
	if err := ro.Locks.Track(w, lock, 0); err != nil {
		return nil, nil, false, fmt.Errorf("renew %s: %w", claim.Key, err)
	}
	if !Continues(lock, recordedFence, claim.Slot) {
		lost = fmt.Errorf("lease of fencing token %d expired while the operator was away: %w", recordedFence, lockbook.ErrLockLost)
		ro.Locks.MarkAtRisk(w.UID, lost)
		return lock, lost, false, nil
	}
	return lock, nil, false, nil
}

// Release gives the lock back by compare-and-delete with the object's token and tells the book it
// is released. It returns lockbook.ErrNotHeld when the lock was not ours: a lock someone else
// holds is left alone. A lease that ran out with nobody granted the lock since
// (lockbook.ErrLapsedUntaken) counts as released. When Redis does not answer, the lock in hand is renewed again until a
// later pass can release it.
func (ro Holdings) Release(ctx context.Context, claim lockbook.Claim, w lockbook.Workload) error {
	lock := ro.Locks.Untrack(w.UID)
	if lock.Semaphore() {
		// The lock in hand names its slot, also when it is not the one the record carries (a lease
		// granted afresh on re-adoption).
		slot := int32(lock.Slot())
		claim.Slot = &slot
	}
	if lock != nil {
		claim.Fence = lock.Fence()
	}
	rctx, cancel := context.WithTimeout(ctx, ro.Config.RedisTimeout)
	err := ro.Locks.Release(rctx, claim)
	cancel()
	if errors.Is(err, lockbook.ErrLapsedUntaken) {
		// Nothing to delete, and nobody held the lock after this holder: as released as a release.
		ctrl.LoggerFrom(ctx).Info("Lease lapsed before the release; no holder since", "lock", claim.Key, "fencingToken", claim.Fence)
		ro.Locks.MarkReleased(w)
		return nil
	}
	if errors.Is(err, lockbook.ErrNotHeld) {
		return err
	}
	if err != nil {
		if lock != nil {
			_ = ro.Locks.Track(w, lock, 0) // keep renewing until we can release
		}
		return fmt.Errorf("release %s: %w", claim.Key, err)
	}
	ro.Locks.MarkReleased(w)
	return nil
}

// PermitsRefused is why a claimant waits without asking Redis: its lock declares more permits than
// Redlock grants (each node would choose a slot of its own). Its text is the LockedJob's
// (locks.RedlockRefusal).
type PermitsRefused struct {
	Lock    string
	Permits int
}

func (e *PermitsRefused) Error() string { return locks.RedlockRefusal(e.Lock, e.Permits) }

// Acquire asks for the lock as a queued waiter, in the queue the LockedJobs of the same lock wait in
// (one score rule, Identity.QueueScore), and has the book renew it once it is ours; claim learns
// the permits it asked with. It returns lockbook.ErrNotAcquired (a *lockbook.QueuedError with the
// place) while the claimant waits, and a *PermitsRefused without asking Redis.
func (ro Holdings) Acquire(ctx context.Context, claim *lockbook.Claim, c locks.Claimant, w lockbook.Workload) (*lockbook.Lock, error) {
	permits, err := ro.Permits.Of(ctx, c)
	if err != nil {
		return nil, err
	}
	if ro.Locks.Admits(permits) < permits {
		return nil, &PermitsRefused{Lock: c.Lock.Name, Permits: permits}
	}
	claim.Permits = permits
	rctx, cancel := context.WithTimeout(ctx, ro.Config.RedisTimeout)
	lock, err := ro.Locks.Acquire(rctx, *claim, TTLOf(c), ro.Config.Identity.QueueScore(c), ro.Config.WaiterLiveness())
	cancel()
	if errors.Is(err, lockbook.ErrNotAcquired) {
		return nil, err
	}
	if err != nil {
		if ro.Waiting != nil {
			// The wake-up that led here was consumed by a call that got no answer: the retry asks.
			ro.Waiting.Wake(claim.Holder)
		}
		return nil, fmt.Errorf("acquire %s: %w", claim.Key, err)
	}
	ro.done(*claim)
	if err := ro.Locks.Track(w, lock, 0); err != nil {
		return nil, fmt.Errorf("renew %s: %w", claim.Key, err)
	}
	return lock, nil
}

// done forgets a claimant that no longer waits.
func (ro Holdings) done(claim lockbook.Claim) {
	if ro.Waiting != nil {
		ro.Waiting.Done(claim.Holder)
	}
}

// GiveBack is what an object that will never hold gives up: the lock the book holds for it, when
// held (one someone else holds is left alone), and its place in the queue. released tells whether
// a lock of ours was released.
func (ro Holdings) GiveBack(ctx context.Context, claim lockbook.Claim, w lockbook.Workload, held bool) (released bool, err error) {
	ro.done(claim)
	if held {
		err := ro.Release(ctx, claim, w)
		if err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return false, err
		}
		released = err == nil
	}
	rctx, cancel := context.WithTimeout(ctx, ro.Config.RedisTimeout)
	err = ro.Locks.Dequeue(rctx, claim)
	cancel()
	if err != nil {
		return released, fmt.Errorf("dequeue %s: %w", claim.Key, err)
	}
	return released, nil
}

// Unguard is what a guard reconciler does for an object that runs, or ran, without the lock it
// names: it is never a holder, so a lock the book holds for it and its place in line are given back
// (GiveBack), except when its namespace may not use the lock's scope, which costs no Redis call
// (locks.ScopeGate); then record writes the object's guard Unguarded, and the book forgets it.
// released tells whether a lock of ours was released, also when a later step failed.
func (ro Holdings) Unguard(ctx context.Context, claim lockbook.Claim, w lockbook.Workload, held, scopeAllowed bool, record func() error) (released bool, err error) {
	if scopeAllowed {
		if released, err = ro.GiveBack(ctx, claim, w, held); err != nil {
			return released, err
		}
	}
	if err := record(); err != nil {
		return released, err
	}
	ro.Locks.Forget(w.UID)
	return released, nil
}
