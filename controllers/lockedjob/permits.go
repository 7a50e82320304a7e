package lockedjob

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Waking waiters when a lock's permits change. How many a lock admits is read by
// locks.PermitReader (sreconcile.PermitReader), from the Lock or ClusterLock that declares it.

// permitsChanged passes a Lock or ClusterLock whose spec changed, or whose status.permits did: the
// view writes that only after Redis has the number (see LockViewReconciler.refresh), and the view
// is the one writer of the number, so waiters woken by the spec alone may ask Redis too early.
var permitsChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return statusPermits(e.ObjectOld) != statusPermits(e.ObjectNew)
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
})

func statusPermits(obj client.Object) int32 {
	switch l := obj.(type) {
	case *batchv1alpha1.Lock:
		return l.Status.Permits
	case *batchv1alpha1.ClusterLock:
		return l.Status.Permits
	}
	return 0
}

// wakeOnPermits maps a Lock or ClusterLock whose permits changed to the waiters of its lock: more
// permits may let them in at once, and nobody else announces it. Each of them asks Redis once.
func (r *LockedJobReconciler) wakeOnPermits(scope batchv1alpha1.LockScope) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		key := r.Config.Identity.KeyOf(scope, o.GetNamespace(), o.GetName())
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
			r.waiting.wake(r.Config.Identity.Holder(locks.ClaimantOf(lj)))
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(lj)})
		}
		return reqs
	}
}
