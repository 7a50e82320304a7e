package guardedjob

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// waitersOfLock lists the waiting guarded Jobs of the lock that the Lock or ClusterLock decl
// declares (sreconcile.WakeOnPermits): more permits may let them in at once, and nobody else
// announces it. Each of them asks Redis once.
func (r *GuardedJobReconciler) waitersOfLock(ctx context.Context, scope batchv1alpha1.LockScope, decl client.Object) []reconcile.Request {
	key := r.Config.Identity.KeyOf(scope, decl.GetNamespace(), decl.GetName())
	waiters := r.waiters(ctx, r.Locks.RedisKey(key))
	reqs := make([]reconcile.Request, 0, len(waiters))
	for _, job := range waiters {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(job)})
	}
	return reqs
}

// waiting tells a guarded Job that waits in line: still suspended by the gate and never fenced.
func waiting(job *batchv1.Job) bool {
	_, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]
	return !fenced && job.Spec.Suspend != nil && *job.Spec.Suspend
}
