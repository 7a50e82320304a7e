package lockedjob

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Waking waiters when a lock's permits change (sreconcile.WakeOnPermits). How many a lock admits
// is read by locks.PermitReader (sreconcile.PermitReader), from the Lock or ClusterLock that
// declares it.

// waitersOfLock lists the waiting LockedJobs of the lock that decl declares, and wakes each.
func (r *LockedJobReconciler) waitersOfLock(ctx context.Context, scope batchv1alpha1.LockScope, decl client.Object) []reconcile.Request {
	key := r.Config.Identity.KeyOf(scope, decl.GetNamespace(), decl.GetName())
	var list batchv1alpha1.LockedJobList
	if err := r.List(ctx, &list, client.MatchingFields{indexLockKey: r.Locks.RedisKey(key)}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		lj := &list.Items[i]
		if lj.Status.Phase != batchv1alpha1.PhaseWaiting {
			continue
		}
		r.waiting.Wake(r.Config.Identity.Holder(locks.ClaimantOf(lj)))
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(lj)})
	}
	return reqs
}
