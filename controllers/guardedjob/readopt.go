package guardedjob

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Re-adopting (stepReadopt, stepDeleteReadopt): the Job's record says it holds the lock and the
// book does not know it (a restart, a new leader). The token is derived from the Job's UID, so one
// call both picks up a lock that is still ours and tells when it is not.

// readopt asks for the lock with the Job's own token, outside the queue. The same fence (and slot)
// continues the acquisition; a lock granted afresh, or held by another, is lost: someone may have
// held it in between, so the Job's pods were not covered.
func (r *GuardedJobReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	permits, err := r.permits.Of(ctx, p.claimant)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if !r.Locks.HandsOff() {
		permits = 1 // what a Job holds on Redlock is a plain lock
	}
	p.claim.Permits = permits
	rctx, cancel := r.redisCtx(ctx)
	lock, err := r.Locks.Readopt(rctx, p.claim, guard.TTLOf(p.claimant))
	cancel()
	if errors.Is(err, lockbook.ErrNotAcquired) {
		cause := fmt.Errorf("lock held by another holder while the operator was away: %w", lockbook.ErrLockLost)
		r.Locks.MarkLost(p.workloadOf(), cause)
		p.obs.lost = cause
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("re-adopt %s: %w", p.claim.Key, err)
	}
	if err := r.Locks.Track(p.workloadOf(), lock, 0); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.claim.Key, err)
	}
	p.obs.holding = lock
	fence := guard.RecordedFence(p.job)
	if !guard.Continues(lock, fence, p.claim.Slot) {
		// Keep the fresh lock until the Job is stopped and its pods are gone; it is released after.
		cause := fmt.Errorf("lease of fencing token %d expired while the operator was away: %w", fence, lockbook.ErrLockLost)
		r.Locks.MarkAtRisk(p.job.UID, cause)
		p.obs.lost = cause
		return ctrl.Result{}, true, nil
	}
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
	r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", p.claimant.Lock.Name, lock.Fence())
	return ctrl.Result{}, true, nil
}
