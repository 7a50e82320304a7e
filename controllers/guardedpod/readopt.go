package guardedpod

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
)

// readopt asks for the lock with the Pod's own token (derived from its UID), outside the queue. The
// same fence (and slot) continues the acquisition; a lock granted afresh, or held by another, is
// lost: someone may have held it in between. A fence nobody wrote through the operator (the gate
// removed by hand with a forged fence) is found so too.
func (r *GuardedPodReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lock, lost, released, err := r.holdings().Readopt(ctx, &p.claim, p.claimant, p.workloadOf(), guard.RecordedFence(p.pod))
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding, p.obs.lost, p.obs.released = lock, lost, released
	if lost != nil || released {
		return ctrl.Result{}, true, nil
	}
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
	r.event(p.pod, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", p.claimant.Lock.Name, lock.Fence())
	return ctrl.Result{}, true, nil
}
