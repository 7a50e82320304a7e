package guardedjob

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
)

// Re-adopting (stepReadopt, stepDeleteReadopt): the Job's record says it holds the lock and the
// book does not know it (a restart, a new leader). The token is derived from the Job's UID, so one
// call both picks up a lock that is still ours and tells when it is not.

// readopt asks for the lock with the Job's own token, outside the queue. The same fence (and slot)
// continues the acquisition; a lock granted afresh, or held by another, is lost: someone may have
// held it in between, so the Job's pods were not covered.
func (r *GuardedJobReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lock, lost, released, err := r.holdings().Readopt(ctx, &p.claim, p.claimant, p.workloadOf(), guard.RecordedFence(p.job))
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding, p.obs.lost, p.obs.released = lock, lost, released
	if lost != nil || released {
		return ctrl.Result{}, true, nil
	}
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
	r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", p.claimant.Lock.Name, lock.Fence())
	return ctrl.Result{}, true, nil
}
