package lockedjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Deleting (stepDeleteJob, stepDeleteRelease): the lock is held until the Job's pods are gone.

// deleteJob deletes the running Job of a LockedJob being deleted; its pods go after it.
func (r *LockedJobReconciler) deleteJob(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	job := p.obs.job
	ctrl.LoggerFrom(ctx).Info("Deleting Job before releasing the lock", "Job", klog.KObj(job))
	if err := r.stopJob(ctx, job, batchv1alpha1.LockLostDelete); err != nil {
		return ctrl.Result{}, false, err
	}
	r.event(p.lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobDeleted, "DeleteJob", "Deleted Job %s; the lock is released once its pods are gone", job.Name)
	p.obs.job = nil
	return ctrl.Result{}, true, nil
}

// deleteRelease waits until the Job's pods are gone, then releases the lock and leaves the queue
// (both whenever the LockedJob had not finished: a crash between acquiring and recording leaves a
// lock that only the token names), and lets the LockedJob go.
func (r *LockedJobReconciler) deleteRelease(ctx context.Context, p *pass) (ctrl.Result, error) {
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	if mayHoldOrWait(p.obs) {
		if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return ctrl.Result{}, err
		}
		if err := r.dequeue(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.removeFinalizer(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	r.Locks.Forget(p.lj.UID)
	return ctrl.Result{}, nil
}

// mayHoldOrWait reports whether the LockedJob may still hold its lock or stand in its queue. Every
// way to a terminal phase, and a release at the pod's outcome, releases or gives up the lock and
// leaves the queue, unless a release failed, which status still shows as held; so a finished or
// released LockedJob needs no Redis call to go.
func mayHoldOrWait(o observation) bool {
	return (!o.terminal && !o.released) || o.holding != nil || o.lockRecorded
}

// waitForPods reports whether pods of the LockedJob's Job still exist, and records that in the
// message. A finished Job has no running pods (its terminal condition comes after they stopped);
// otherwise every pod object counts until it is gone, terminating or not. Only pod metadata is read.
func (r *LockedJobReconciler) waitForPods(ctx context.Context, p *pass) (bool, error) {
	lj := p.lj
	if lj.Status.JobName == "" || (p.obs.job != nil && reconcile.JobFinished(p.obs.job)) {
		return false, nil
	}
	n, err := r.podsOf(ctx, lj.Namespace, lj.Status.JobName)
	if err != nil || n == 0 {
		return false, err
	}
	lj.Status.Message = fmt.Sprintf("Waiting for %d pod(s) of Job %s to be gone before releasing lock %s", n, lj.Status.JobName, lj.Spec.Lock.Name)
	return true, nil
}
