package reconcile

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// PermitReader reads the permits of locks from the manager's cache, and answers 1 for every lock
// while the Lock kinds are not served.
func PermitReader(mgr ctrl.Manager) locks.PermitReader {
	return locks.PermitReader{Reader: mgr.GetClient(), Served: UnservedKind(mgr, "Lock", "ClusterLock") == ""}
}

// WaitersOf lists the requests of the waiters of the lock that the Lock or ClusterLock decl
// declares in scope.
type WaitersOf func(ctx context.Context, scope batchv1alpha1.LockScope, decl client.Object) []reconcile.Request

// WakeOnPermits has b wake a lock's waiters when its permits change: more may hold it now, or
// fewer, which a waiter's own backoff would notice only much later. Without the Lock kinds every
// lock admits one holder and there is nothing to watch.
func WakeOnPermits(b *builder.Builder, permits locks.PermitReader, waiters WaitersOf) *builder.Builder {
	if !permits.Served {
		return b
	}
	mapper := func(scope batchv1alpha1.LockScope) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return waiters(ctx, scope, o)
		})
	}
	changed := builder.WithPredicates(permitsChanged)
	return b.Watches(&batchv1alpha1.Lock{}, mapper(batchv1alpha1.LockScopeNamespace), changed).
		Watches(&batchv1alpha1.ClusterLock{}, mapper(batchv1alpha1.LockScopeCluster), changed)
}

// permitsChanged passes a Lock or ClusterLock whose spec changed, or whose status.permits did: the
// view writes that only after Redis has the number (see the lockview reconciler's refresh), and
// the view is the one writer of the number, so waiters woken by the spec alone may ask Redis too
// early.
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
