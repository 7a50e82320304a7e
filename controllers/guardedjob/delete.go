package guardedjob

import (
	"context"
	"errors"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Deleting (stepDeleteRelease): the lock is held until the Job's pods are gone. Our finalizer keeps
// the Job, and with it the lock's record, until then; a Job deleted while the operator was down,
// or deleted with propagationPolicy Orphan, still names its lock here.

// deleteRelease waits until no pod of the Job runs, then releases the lock (if ours) and drops the
// finalizer. While the Job exists the garbage collector does not delete its pods (a background
// deletion waits for the owner to be gone), so a Job whose pods still run is suspended: the Job
// controller deletes its active pods.
func (r *GuardedJobReconciler) deleteRelease(ctx context.Context, p *pass) (ctrl.Result, error) {
	if !p.obs.finished {
		n, err := r.runningPods(ctx, p.job)
		if err != nil {
			return ctrl.Result{}, err
		}
		if n > 0 {
			if err := r.suspendForDeletion(ctx, p); err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{RequeueAfter: podRecheck}, nil
		}
	}
	if !ended(p.obs.guard) || p.obs.holding != nil {
		if err := r.release(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return ctrl.Result{}, err
		}
	}
	err := r.patchJob(ctx, p, "remove finalizer", func(job *batchv1.Job) { controllerutil.RemoveFinalizer(job, finalizer) })
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.Locks.Forget(p.job.UID)
	return ctrl.Result{}, nil
}

// suspendForDeletion suspends a deleted Job whose pods still run, once.
func (r *GuardedJobReconciler) suspendForDeletion(ctx context.Context, p *pass) error {
	if p.obs.suspended {
		return nil
	}
	return r.patchJob(ctx, p, "suspend for deletion", func(job *batchv1.Job) { job.Spec.Suspend = ptr.To(true) })
}
