package guardedjob

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Ending (stepFinish, stepLoseLock, stepReleaseAfterLoss, stepUnguarded): release the lock when the
// Job ends, apply the on-lock-lost policy when it is lost, and never hold for a Job that runs
// without us.

// finish releases the lock of a Job that completed or failed, or whose pods settled its outcome
// before its condition came (p.obs.settled), then records Released and drops the finalizer in one
// write. Its terminal condition (reconcile.JobFinished), or its settled pods
// (reconcile.OutcomeSettled), say none of its pods runs or will, so no pod is listed from the API
// server: the release is on the handoff's path. A release that finds the lock not ours means it
// was lost during the run: the record says Lost, never Released. After a release at the pod's
// outcome the Job's own condition, when it comes, is the Job controller's to tell.
func (r *GuardedJobReconciler) finish(ctx context.Context, p *pass) error {
	fence := guard.RecordedFence(p.job)
	state, eventType, reason := batchv1alpha1.GuardReleased, corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete
	ok, msg := reconcile.JobOutcome(p.job)
	switch {
	case !p.obs.finished:
		reason, msg = batchv1alpha1.ReasonReleased, fmt.Sprintf("The pod of Job %s succeeded", p.job.Name)
	case !ok:
		eventType, reason = corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed
	}
	msg = fmt.Sprintf("%s; released lock %s (fencing token %d)", msg, p.claimant.Lock.Name, fence)
	if !p.obs.released {
		err := r.release(ctx, p)
		if errors.Is(err, lockbook.ErrNotHeld) {
			r.Locks.MarkLost(p.workloadOf(), err)
			state, eventType, reason = batchv1alpha1.GuardLost, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost
			msg = fmt.Sprintf("Lock %s (fencing token %d) was not ours when the Job ended; another holder may have run during the Job", p.claimant.Lock.Name, fence)
		} else if err != nil {
			return err
		}
	}
	if err := r.recordEnd(ctx, p, state); err != nil {
		return err
	}
	r.event(p.job, eventType, reason, "Finish", "%s", msg)
	r.Locks.Forget(p.job.UID)
	return nil
}

// recordEnd writes an end and drops the finalizer: the lock it guarded is released or lost.
func (r *GuardedJobReconciler) recordEnd(ctx context.Context, p *pass, g batchv1alpha1.GuardState) error {
	return r.patchJob(ctx, p, "record "+string(g), func(job *batchv1.Job) {
		guard.Annotate(job, batchv1alpha1.AnnotationGuard, string(g))
		controllerutil.RemoveFinalizer(job, finalizer)
	})
}

// release gives the lock back by compare-and-delete with the Job's token (which works without a
// *Lock, after a restart). It returns ErrNotHeld when the lock was not ours: a lock someone else
// holds is left alone.
func (r *GuardedJobReconciler) release(ctx context.Context, p *pass) error {
	if err := r.holdings().Release(ctx, p.claim, p.workloadOf()); err != nil {
		return err
	}
	p.obs.released, p.obs.holding = true, nil
	ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
	return nil
}

// loseLock applies the on-lock-lost policy to the Job of a lost (or at-risk) lock, if the book's
// stop has not already, and records Lost. The lock is released, if it is still ours, only once
// the Job's pods are gone (stepReleaseAfterLoss).
func (r *GuardedJobReconciler) loseLock(ctx context.Context, p *pass) error {
	policy := p.claimant.Lock.OnLockLostOrDefault()
	if !p.obs.finished && !p.obs.deleting {
		if err := r.stopJob(ctx, p.job, policy); err != nil {
			return err
		}
	}
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardLost); err != nil {
		return err
	}
	msg := fmt.Sprintf("Lock %s lost while the Job ran (%v); policy %s applied", p.claimant.Lock.Name, p.obs.lost, policy)
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", p.claim.Key, "reason", p.obs.lost.Error(), "policy", policy)
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock", "%s", msg)
	return nil
}

// releaseAfterLoss lets a Lost Job go once none of its pods runs: it releases what is still ours (a
// lease at risk is still held, and covered the pods until they were gone) and drops the finalizer.
// Under policy Ignore the pods run on; the Job's end starts the pass that lets it go.
func (r *GuardedJobReconciler) releaseAfterLoss(ctx context.Context, p *pass) (ctrl.Result, error) {
	n, err := r.runningPods(ctx, p.job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if n > 0 {
		if p.claimant.Lock.OnLockLostOrDefault() == batchv1alpha1.LockLostIgnore && !p.obs.finished {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: podRecheck}, nil
	}
	if err := r.release(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
		return ctrl.Result{}, err
	}
	if err := r.recordEnd(ctx, p, batchv1alpha1.GuardLost); err != nil {
		return ctrl.Result{}, err
	}
	r.Locks.Forget(p.job.UID)
	return ctrl.Result{}, nil
}

// stopJob applies a lock-lost policy to a running Job: Suspend (the Job controller deletes its
// active pods), Delete (the Job and, in the background, its pods), or Ignore.
func (r *GuardedJobReconciler) stopJob(ctx context.Context, job *batchv1.Job, policy batchv1alpha1.LockLostPolicy) error {
	switch policy {
	case batchv1alpha1.LockLostSuspend:
		if job.Spec.Suspend != nil && *job.Spec.Suspend {
			return nil
		}
		base := job.DeepCopy()
		job.Spec.Suspend = ptr.To(true)
		if err := r.Client.Patch(ctx, job, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("suspend job %s: %w", job.Name, err)
		}
	case batchv1alpha1.LockLostDelete:
		err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete job %s: %w", job.Name, err)
		}
	}
	return nil
}

// stopWorkload is the lock book's way to stop the Job of a lost lock at once, without waiting for a
// reconcile worker. The pass that runs afterwards finds it stopped and records Lost.
func (r *GuardedJobReconciler) stopWorkload(ctx context.Context, w lockbook.Workload, cause error) {
	job, err := r.getJob(ctx, w.Object)
	if err == nil && job != nil && job.UID == w.UID && !reconcile.JobFinished(job) {
		err = r.stopJob(ctx, job, w.Policy)
	}
	if err != nil {
		ctrl.Log.WithName("lockbook").Error(err, "Stopping the guarded Job of a lost lock failed; the reconciler retries",
			"Job", klog.KRef(w.Object.Namespace, w.Object.Name), "cause", cause.Error())
	}
}

// markUnguarded records a labelled Job that runs, or ran, without our lock. It is left running (it
// may be half through its work) and never becomes a holder: a lock the book holds for it, or a
// place in line, is given back. A namespace refused its scope costs no Redis call here either.
func (r *GuardedJobReconciler) markUnguarded(ctx context.Context, p *pass) error {
	released, err := r.holdings().Unguard(ctx, p.claim, p.workloadOf(), p.obs.holding != nil, p.obs.scopeAllowed,
		func() error { return r.recordGuard(ctx, p, batchv1alpha1.GuardUnguarded) })
	if released {
		p.obs.released, p.obs.holding = true, nil
		ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
	}
	if err != nil {
		return err
	}
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonUnguarded, "Acquire", "%s", guard.UnguardedNote(locks.KindJob, p.claimant.Lock.Name,
		"runs without it: it was not created suspended by the admission gate, or someone else unsuspended it"))
	return nil
}
