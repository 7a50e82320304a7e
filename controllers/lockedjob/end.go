package lockedjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Ending (stepFinish, stepLoseLock, stepReleaseAfterEnd, stepJobGone): release the lock when the Job
// ends, apply spec.lock.onLockLost when the lock is lost, and stop Jobs.

// finish releases the lock of a Job that completed or failed, unless it went at the pod's outcome
// (releaseAtOutcome), and records the outcome. A release that finds the lock not ours is a loss
// (notOursAtEnd).
func (r *LockedJobReconciler) finish(ctx context.Context, p *pass) (next bool, err error) {
	lj := p.lj
	if !p.obs.released {
		err := r.release(ctx, p)
		if errors.Is(err, lockbook.ErrNotHeld) {
			r.notOursAtEnd(p)
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	if lj.Status.ReleasedAt == nil {
		lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	}
	ok, msg := true, "The Job ended"
	if p.obs.job != nil {
		ok, msg = reconcile.JobOutcome(p.obs.job)
	}
	// One Event tells the end and the release, also when the release came first, at the pod's
	// outcome (releaseAtOutcome): status told that one at once, and an Event of its own would be
	// one more write per LockedJob for what this one says.
	when := ""
	if p.before.Status.ReleasedAt != nil {
		when = " when its pod succeeded" // the only release recorded before the outcome
	}
	told := fmt.Sprintf("%s; released lock %s%s (fencing token %d%s)", msg, lj.Spec.Lock.Name, when,
		derefInt64(lj.Status.FencingToken), slotPhrase(lj.Status.Slot))
	tell(lj, jobEnded(ok, msg))
	if ok {
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete, "Finish", "%s", told)
	} else {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed, "Finish", "%s", told)
	}
	// Record the outcome now and let the LockedJob go in this pass (stepForget): waiting for the
	// pass its own status write triggers left most finished LockedJobs of a burst holding their
	// finalizer when they were deleted, and each deletion waited for a pass of the operator. The
	// outcome is written first, so a LockedJob is never let go before its end is recorded.
	if err := r.recordNow(ctx, p); err != nil {
		return false, err
	}
	p.obs.terminal = true
	return true, nil
}

// releaseAtOutcome releases the lock of a Job whose pods say it is done (reconcile.OutcomeSettled)
// before its condition says so, which comes a second or more later: the next holder starts that
// much sooner. The release is recorded at once, so a restart does not take the Job for one that
// still holds its lock, and kubectl shows one holder; the phase follows the Job's condition when it
// comes (stepAwaitOutcome, then stepFinish), whose Event tells the release too.
func (r *LockedJobReconciler) releaseAtOutcome(ctx context.Context, p *pass) (next bool, err error) {
	lj := p.lj
	err = r.release(ctx, p)
	if errors.Is(err, lockbook.ErrNotHeld) {
		r.notOursAtEnd(p)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	lj.Status.Message = fmt.Sprintf("The pod of Job %s succeeded; lock released; the outcome is recorded when the Job finishes", p.obs.job.Name)
	return false, r.recordNow(ctx, p)
}

// notOursAtEnd observes a lock found not ours when the Job ended: it was lost during the run (a
// paused operator, a Redis that lost data), so the state machine goes on to LockLost, never
// Succeeded.
func (r *LockedJobReconciler) notOursAtEnd(p *pass) {
	cause := fmt.Errorf("the lock was not ours when the Job ended; another holder may have run during the Job: %w", lockbook.ErrLockLost)
	r.Locks.MarkLost(workloadOf(p.lj), cause)
	p.obs.lost = cause
}

// releaseAndTell releases (see release) and says so in a Released Event.
func (r *LockedJobReconciler) releaseAndTell(ctx context.Context, p *pass) error {
	if err := r.release(ctx, p); err != nil {
		return err
	}
	r.event(p.lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReleased, "Release", "Released lock %s (fencing token %d%s)",
		p.lj.Spec.Lock.Name, derefInt64(p.lj.Status.FencingToken), slotPhrase(p.lj.Status.Slot))
	return nil
}

// release gives the lock back by compare-and-delete with this LockedJob's token (which works
// without a *Lock, after a restart) and records it. It returns ErrNotHeld when the lock was not ours;
// a lock someone else holds is left alone. A lease that ran out with nobody granted the lock since
// (lockbook.ErrLapsedUntaken: the operator was away when the Job ended) counts as released. The
// caller tells it: finish in its own Event.
func (r *LockedJobReconciler) release(ctx context.Context, p *pass) error {
	lj := p.lj
	lock := r.Locks.Untrack(lj.UID)
	r.waiting.Done(p.claim.Holder)
	c := p.lockClaim()
	if lock.Semaphore() {
		// The lock in hand names its slot, also when it is not the slot status records (a lease
		// that ran out while the operator was away, granted afresh on re-adoption).
		slot := int32(lock.Slot())
		c.Slot = &slot
	}
	if lock != nil {
		c.Fence = lock.Fence()
	}
	rctx, cancel := r.redisCtx(ctx)
	err := r.Locks.Release(rctx, c)
	cancel()
	lapsed := errors.Is(err, lockbook.ErrLapsedUntaken)
	switch {
	case lapsed: // released, below
	case errors.Is(err, lockbook.ErrNotHeld):
		r.redisUp(p)
		return err
	case err != nil:
		if lock != nil {
			_ = r.Locks.Track(workloadOf(lj), lock, renewIntervalOf(lj)) // keep renewing until we can release
		}
		return r.redisDown(p, fmt.Errorf("release %s: %w", p.claim.Key, err))
	}
	r.redisUp(p)
	r.Locks.MarkReleased(workloadOf(lj))
	p.obs.released, p.obs.holding = true, nil
	if lapsed {
		// Nothing to delete, and nobody held the lock after us: as released as a release.
		ctrl.LoggerFrom(ctx).Info("Lease lapsed before the release; no holder since", "lock", p.claim.Key, "fencingToken", c.Fence)
		tell(lj, released("Lease lapsed before the release, with no holder since (fencing token still the last)"))
	} else {
		ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
		tell(lj, released("Lock released"))
	}
	lj.Status.BlockedBy, lj.Status.QueuePosition = "", nil
	return nil
}

func (r *LockedJobReconciler) dequeue(ctx context.Context, p *pass) error {
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	if err := r.Locks.Dequeue(rctx, p.lockClaim()); err != nil {
		return r.redisDown(p, fmt.Errorf("dequeue %s: %w", p.claim.Key, err))
	}
	return nil
}

// releaseAfterEnd releases a lock still held by a finished LockedJob (a release that failed, or a
// lock whose lease was at risk and whose Job was stopped) once the Job's pods are gone.
func (r *LockedJobReconciler) releaseAfterEnd(ctx context.Context, p *pass) (ctrl.Result, error) {
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	err := r.releaseAndTell(ctx, p)
	switch {
	case errors.Is(err, lockbook.ErrNotHeld):
		// Expired or held by another meanwhile: nothing is ours to release, and status must stop saying so.
		tell(p.lj, released("Lock no longer held"))
	case err != nil:
		return ctrl.Result{}, err
	}
	r.Locks.Forget(p.lj.UID)
	return ctrl.Result{}, nil
}

// loseLock applies spec.lock.onLockLost to the Job of a LockedJob whose lock is gone or at risk.
// The LockedJob goes terminal only once its Job is stopped (or the policy is Ignore): a Job that may
// still run unstopped is never left behind a terminal status.
func (r *LockedJobReconciler) loseLock(ctx context.Context, p *pass, cause error) error {
	lj := p.lj
	policy := lj.Spec.Lock.OnLockLostOrDefault()
	if job := p.obs.job; job != nil && !reconcile.JobFinished(job) {
		if err := r.stopJob(ctx, job, policy); err != nil {
			return err
		}
	}
	r.waiting.Done(p.claim.Holder)
	msg := fmt.Sprintf("Lock %s lost while the Job ran (%v); policy %s applied", lj.Spec.Lock.Name, cause, policy)
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", p.claim.Key, "reason", cause.Error(), "policy", policy)
	tell(lj, lockLost(msg))
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock", "%s", msg)
	return nil
}

// stopJob applies a lock-lost policy to a running Job.
func (r *LockedJobReconciler) stopJob(ctx context.Context, job *batchv1.Job, policy batchv1alpha1.LockLostPolicy) error {
	switch policy {
	case batchv1alpha1.LockLostSuspend:
		if job.Spec.Suspend != nil && *job.Spec.Suspend {
			return nil
		}
		base := job.DeepCopy()
		suspend := true
		job.Spec.Suspend = &suspend
		if err := r.Patch(ctx, job, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("suspend job %s: %w", job.Name, err)
		}
	case batchv1alpha1.LockLostDelete:
		if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete job %s: %w", job.Name, err)
		}
	}
	return nil
}

// stopWorkload is the lock book's way to stop the Job of a lost lock at once, without waiting for a
// reconcile worker. The reconciler that runs afterwards finds the Job stopped and records LockLost.
func (r *LockedJobReconciler) stopWorkload(ctx context.Context, w lockbook.Workload, cause error) {
	lj := lockedJobOf(w)
	job, err := r.findJob(ctx, lj, w.Job)
	if err == nil && job != nil && !reconcile.JobFinished(job) {
		err = r.stopJob(ctx, job, w.Policy)
	}
	if err != nil {
		ctrl.Log.WithName("lockbook").Error(err, "Stopping the Job of a lost lock failed; the reconciler retries",
			"LockedJob", klog.KRef(lj.Namespace, lj.Name), "cause", cause.Error())
	}
}

// jobGone ends a LockedJob whose Job was deleted out of band (kubectl delete job, a TTL controller,
// garbage collection). The Job is never created again: that would run the workload twice under one
// fencing token. The lock is held until the Job's pods are gone. The outcome is recorded before the
// release: a release whose record then lost a race left the next pass with a released lock and no
// Job, which it took for a Job that ended, Succeeded (found by the operator model). Recorded first,
// a lost race releases nothing, and a terminal LockedJob whose status still says held is released
// by stepReleaseAfterEnd.
func (r *LockedJobReconciler) jobGone(ctx context.Context, p *pass) (ctrl.Result, error) {
	lj := p.lj
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	msg := fmt.Sprintf("Job %s was deleted before it finished; it is not created again", lj.Status.JobName)
	tell(lj, jobDeleted(msg))
	if err := r.recordNow(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
		return ctrl.Result{}, err
	}
	lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobDeleted, "JobGone", "%s", msg)
	return ctrl.Result{}, nil
}
