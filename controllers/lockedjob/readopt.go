package lockedjob

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Re-adopting (stepReadopt, stepDeleteReadopt): picking up a lock status says this LockedJob holds
// when the book does not know it (a restart, a new leader).

// acquireOwn acquires or re-adopts the lock with this LockedJob's own token (no queue).
func (r *LockedJobReconciler) acquireOwn(ctx context.Context, p *pass) (*lockbook.Lock, error) {
	permits, err := r.permits.Of(ctx, locks.ClaimantOf(p.lj))
	if err != nil {
		return nil, err
	}
	if !r.Locks.HandsOff() {
		// Redlock grants no semaphore (see waitForPermits): what this LockedJob holds there is a plain
		// lock, also when its Lock declared more permits since.
		permits = 1
	}
	p.permits = permits
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	return r.Locks.Readopt(rctx, p.lockClaim(), ttlOf(p.lj))
}

// readopt picks up a lock this LockedJob held before the operator restarted (or its leader
// changed). The token is derived, so the same Acquire both re-adopts a lock that is still ours and
// tells us when it is not, or that our own release ended the acquisition (releasedBefore).
func (r *LockedJobReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj := p.lj
	lock, err := r.acquireOwn(ctx, p)
	if errors.Is(err, lockbook.ErrReleasedBefore) {
		r.releasedBefore(ctx, p)
		return ctrl.Result{}, true, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		r.lostWhileAway(p)
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("re-adopt %s: %w", p.claim.Key, err))
	}
	r.redisUp(p)
	if !readopted(lock, lj) {
		// The lease ran out while nobody renewed it and this Acquire took it afresh: someone may have
		// held it in between, so the running Job was not protected. Keep the fresh lock until the
		// Job is stopped and its pods are gone; it is released after that.
		cause := fmt.Errorf("lease of fencing token %d expired while the operator was away: %w", derefInt64(lj.Status.FencingToken), lockbook.ErrLockLost)
		if err := r.Locks.Track(workloadOf(lj), lock, renewIntervalOf(lj)); err != nil {
			return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.claim.Key, err)
		}
		r.Locks.MarkAtRisk(lj.UID, cause)
		p.obs.holding, p.obs.lost = lock, cause
		return ctrl.Result{}, true, nil
	}
	if err := r.Locks.Track(workloadOf(lj), lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.claim.Key, err)
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", lj.Spec.Lock.Name, lock.Fence())
	return ctrl.Result{}, true, nil
}

// releasedBefore takes for its own the release that ended the acquisition status records, which
// the re-adoption found from the release mark (lockbook.ErrReleasedBefore): a pass of another
// operator's (a deposed leader's, resumed beside its successor) or one whose record a crash cut off
// released it, and the lock is free or another's since. The book and the pass record the release,
// and the pass goes on to the end rather than LockLost: the Job ran alone (found by the operator
// model with a deposed leader). The release came at the Job's outcome or once its pods were gone,
// never while they ran.
func (r *LockedJobReconciler) releasedBefore(ctx context.Context, p *pass) {
	r.redisUp(p)
	r.Locks.MarkReleased(workloadOf(p.lj))
	p.obs.released = true
	ctrl.LoggerFrom(ctx).Info("Found the lock released under its recorded fence by an earlier pass", "lock", p.claim.Key,
		"fencingToken", derefInt64(p.lj.Status.FencingToken))
}

// lostWhileAway records that a lock this LockedJob held is now held by someone else, in the book
// and in p.obs.lost.
func (r *LockedJobReconciler) lostWhileAway(p *pass) {
	cause := fmt.Errorf("lock held by another holder while the operator was away: %w", lockbook.ErrLockLost)
	r.Locks.MarkLost(workloadOf(p.lj), cause)
	p.obs.lost = cause
}

// readopted reports whether lock continues the acquisition that status records: found held with
// our token (not granted afresh) under the recorded fencing token, in the recorded slot.
func readopted(lock *lockbook.Lock, lj *batchv1alpha1.LockedJob) bool {
	return lock.Readopted() && lj.Status.FencingToken != nil && lock.Fence() == *lj.Status.FencingToken &&
		lock.Slot() == int(derefInt32(lj.Status.Slot))
}

// deleteReadopt re-adopts the lock of a LockedJob being deleted after an operator restart, so the
// lock keeps covering the Job's pods until they are gone.
func (r *LockedJobReconciler) deleteReadopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj := p.lj
	lock, err := r.acquireOwn(ctx, p)
	if errors.Is(err, lockbook.ErrReleasedBefore) {
		r.releasedBefore(ctx, p)
		return ctrl.Result{}, true, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		r.lostWhileAway(p)
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "Readopt",
			"Could not re-adopt lock %s while deleting (%v): the Job's pods may overlap the next holder", lj.Spec.Lock.Name, p.obs.lost)
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Readopt",
			"Could not re-adopt lock %s while deleting: %v", lj.Spec.Lock.Name, err)
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("re-adopt %s: %w", p.claim.Key, err))
	}
	if err := r.Locks.Track(workloadOf(lj), lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.claim.Key, err)
	}
	p.obs.holding = lock
	if !readopted(lock, lj) {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "Readopt",
			"The lease of lock %s had expired while the operator was away; holding it again until the Job's pods are gone", lj.Spec.Lock.Name)
	}
	return ctrl.Result{}, true, nil
}
