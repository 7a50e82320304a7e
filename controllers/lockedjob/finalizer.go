package lockedjob

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// The finalizer guards a held lock and the pods under it.

// addFinalizer stores the finalizer before anything is acquired, with optimistic locking so a
// stale pass cannot drop another controller's finalizer.
func (r *LockedJobReconciler) addFinalizer(ctx context.Context, p *pass) error {
	base := p.lj.DeepCopy()
	controllerutil.AddFinalizer(p.lj, finalizer)
	if err := r.Patch(ctx, p.lj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// letGo removes the finalizer of a finished LockedJob that holds no lock and has no Job that may
// still run: the finalizer guards a lock and the pods under it, and this one has neither, so its
// deletion needs no pass of the operator (deleting 1,000 finished LockedJobs waited for 1,000
// passes). A Job left running (spec.lock.onLockLost Ignore, or a suspended one) keeps the
// finalizer, and deletion stops it as before.
func (r *LockedJobReconciler) letGo(ctx context.Context, p *pass) error {
	if job := p.obs.job; job != nil && !reconcile.JobFinished(job) {
		return nil
	}
	return r.removeFinalizer(ctx, p)
}

func (r *LockedJobReconciler) removeFinalizer(ctx context.Context, p *pass) error {
	base := p.lj.DeepCopy()
	controllerutil.RemoveFinalizer(p.lj, finalizer)
	if err := r.Patch(ctx, p.lj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}
