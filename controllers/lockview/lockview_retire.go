package lockview

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The view retiring a lock's permits: setting a lock back to one permit when its declaration goes
// (the object's deletion, under the finalizer), or when Redis stores a number that no object
// declares (an orphan, found by a scan).

// retire sets the lock of an object being deleted back to one permit and lets the object go once
// the lock is plain again (see retireKey).
func (r *LockViewReconciler) retire(ctx context.Context, obj client.Object, key string) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, permitsFinalizer) {
		return reconcile.Result{}, nil
	}
	res, err := r.retireKey(ctx, key)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	controllerutil.RemoveFinalizer(obj, permitsFinalizer)
	if err := r.Update(ctx, obj); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("remove finalizer of lock %s: %w", key, err)
	}
	r.forget(client.ObjectKeyFromObject(obj))
	return reconcile.Result{}, nil
}

// retireKey sets the lock named key back to one permit, as no declaration means: at once, so nobody
// more is admitted, and the lock is plain again once no holder keeps a slot above 0 (until then
// Redis must go on counting that holder, and the lock is looked at again). It also serves a lock
// whose object is gone without having been retired (its finalizer was taken away, or it was deleted
// while the operator did not run): a stored number that nothing declares would admit holders side
// by side for good.
func (r *LockViewReconciler) retireKey(ctx context.Context, key string) (reconcile.Result, error) {
	if err := r.setPermits(ctx, key, 1); err != nil {
		return reconcile.Result{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	slots, err := r.Locks.Slots(rctx, key)
	cancel()
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("inspect lock %s: %w", key, err)
	}
	if slots.HeldAbove(0) {
		return reconcile.Result{RequeueAfter: r.MinInterval}, nil
	}
	if err := r.setPermits(ctx, key, 1); err != nil { // the upper slots drained since the first write
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// findOrphans looks, at start and every Resync, for locks whose permits Redis stores, and sends each
// lock this cluster may declare to its kind's controller: a lock whose object is gone is retired
// there (reconcileLock), one whose object exists is settled by its usual pass. It runs on the
// leader only, like the controllers.
func (r *LockViewReconciler) findOrphans(ctx context.Context) error {
	for {
		r.sendOrphans(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Resync):
		}
	}
}

func (r *LockViewReconciler) sendOrphans(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	names, err := r.Locks.Semaphores(rctx)
	cancel()
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the locks whose permits Redis stores failed; looking again after the resync period")
		return
	}
	for _, name := range names {
		scope, namespace, lock, ok := r.Identity.Parse(name)
		if !ok {
			continue // another cluster's namespaced lock, or not one of this operator's keys
		}
		var obj client.Object = &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: lock}}
		ch := r.orphanLocks
		if scope == batchv1alpha1.LockScopeCluster {
			obj, ch = &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: lock}}, r.orphanClusterLocks
		}
		if err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			continue // declared (its own passes settle it), or the cache cannot say: the next round will
		}
		ev := event.GenericEvent{Object: obj}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}
