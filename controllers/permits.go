package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Semaphores (docs/design.md, "Semaphores and the per-lock view"): a lock admits as many holders
// as the Lock (scope Namespace) or ClusterLock (scope Cluster) named after it declares in
// spec.permits; a lock nobody declares admits one. Redis keeps the number the view controller wrote,
// its one writer (see LockViewReconciler.settlePermits), and the lock library obeys what Redis
// keeps, also for a caller that does not pass it; the number an acquisition passes can only lower
// it.

// declaredLock returns the Lock or ClusterLock that declares lj's lock, and its name.
func declaredLock(lj *batchv1alpha1.LockedJob) (client.Object, types.NamespacedName) {
	if lj.Spec.Lock.ScopeOrDefault() == batchv1alpha1.LockScopeCluster {
		return &batchv1alpha1.ClusterLock{}, types.NamespacedName{Name: lj.Spec.Lock.Name}
	}
	return &batchv1alpha1.Lock{}, types.NamespacedName{Namespace: lj.Namespace, Name: lj.Spec.Lock.Name}
}

// permitReader reads how many may hold a lock at once, for the reconcilers that acquire or look.
type permitReader struct {
	reader client.Reader // the manager's cache
	served bool          // the Lock and ClusterLock CRDs are installed
}

func newPermitReader(mgr ctrl.Manager) permitReader {
	return permitReader{reader: mgr.GetClient(), served: unservedKind(mgr, "Lock", "ClusterLock") == ""}
}

// of returns how many may hold lj's lock at once: the declaring object's spec.permits, or 1 when
// nothing declares it, the declaring object is being deleted, or the Lock kinds are not installed.
func (p permitReader) of(ctx context.Context, lj *batchv1alpha1.LockedJob) (int, error) {
	if !p.served {
		return 1, nil
	}
	obj, name := declaredLock(lj)
	err := p.reader.Get(ctx, name, obj)
	if apierrors.IsNotFound(err) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get the permits of lock %s: %w", lj.Spec.Lock.Name, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return 1, nil // being deleted: its lock goes back to one permit (LockViewReconciler.retire)
	}
	return permitsIn(obj), nil
}

// permitsIn reads spec.permits of a Lock or ClusterLock; an object stored without spec (the
// default applies only when spec is present) admits one.
func permitsIn(obj client.Object) int {
	var n int32
	switch l := obj.(type) {
	case *batchv1alpha1.Lock:
		n = l.Spec.Permits
	case *batchv1alpha1.ClusterLock:
		n = l.Spec.Permits
	}
	return max(int(n), 1)
}

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
			r.waiting.wake(r.Config.Identity.Holder(lj))
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(lj)})
		}
		return reqs
	}
}
