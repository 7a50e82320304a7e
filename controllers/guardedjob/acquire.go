package guardedjob

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Acquiring (stepAcquire) and unsuspending (stepUnsuspend): join the lock's queue, wait or be
// handed the lock, then let the Job run under it with one write.

// acquire asks for the lock as a queued waiter (guard.Holdings.Acquire) and, once it is ours, has the
// unsuspend step follow in the same pass. A waiter asks only when something may have changed
// (guard.Holdings.Asks).
func (r *GuardedJobReconciler) acquire(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if res, ask := r.holdings().Asks(p.claim, r.Clock.Now()); !ask {
		return res, false, nil
	}
	lock, err := r.holdings().Acquire(ctx, &p.claim, p.claimant, p.workloadOf())
	if refused, ok := errors.AsType[*guard.PermitsRefused](err); ok {
		return r.waitForPermits(ctx, p, refused), false, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		return r.wait(ctx, p, err), false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", p.claim.Key, "fencingToken", lock.Fence(), "slot", lock.Slot())
	p.acquired = fmt.Sprintf("Acquired lock %s with fencing token %d%s", p.claimant.Lock.Name, lock.Fence(), guard.SlotPhrase(lock))
	return ctrl.Result{}, true, nil
}

// waitForPermits keeps a Job suspended whose lock declares more permits than Redlock can grant (the
// LockedJob's rule, locks.RedlockRefusal), and says so in an Event on every try: the Job has no
// status to say it in, and the recorder folds repeats of one Event into a series.
func (r *GuardedJobReconciler) waitForPermits(ctx context.Context, p *pass, refused *guard.PermitsRefused) ctrl.Result {
	ctrl.LoggerFrom(ctx).Info("Waiting: the lock declares more permits than Redlock grants", "lock", p.claim.Key, "permits", refused.Permits)
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonPermitsUnsupported, "Acquire", "%s", refused.Error())
	return ctrl.Result{RequeueAfter: r.Config.WaitBackoffMax}
}

// wait leaves the Job suspended in line. Nothing is written: the Job's record says nothing while it
// waits, so waiting costs no API write. The release waker wakes the waiter a release frees the
// lock for; the head asks again on its backoff (an expiry is announced by nobody), those behind it
// only at the queue re-check while the queue keeper keeps them in line (guard.Holdings.Wait).
func (r *GuardedJobReconciler) wait(ctx context.Context, p *pass, notAcquired error) ctrl.Result {
	if qe, ok := errors.AsType[*lockbook.QueuedError](notAcquired); ok {
		ctrl.LoggerFrom(ctx).V(1).Info("Waiting for lock", "lock", p.claim.Key, "position", qe.Position)
	}
	now := r.Clock.Now()
	return r.holdings().Wait(p.claim, p.workloadOf(), notAcquired, now, now.Sub(p.job.CreationTimestamp.Time))
}

// unsuspend lets the Job run under the lock, in one optimistic write: the fence, lock, holder and
// slot in the pod template (whose env vars the admission gate pointed at those annotations) with
// the label of the reconciler's pod cache, the record in the Job's annotations, the finalizer, and
// suspend false. A pod can start only after this write, so none ever runs without the fence, nor
// with an older one; a pass that read a stale Job writes nothing. The merge patch carries the
// whole finalizer list, the others' included.
func (r *GuardedJobReconciler) unsuspend(ctx context.Context, p *pass) error {
	lock := p.obs.holding
	fence, slot := strconv.FormatInt(lock.Fence(), 10), strconv.Itoa(lock.Slot())
	err := r.patchJob(ctx, p, "unsuspend", func(job *batchv1.Job) {
		guard.Annotate(job,
			batchv1alpha1.AnnotationFencingToken, fence,
			batchv1alpha1.AnnotationHolder, p.claim.Holder,
			batchv1alpha1.AnnotationGuardLockKey, r.Locks.RedisKey(p.claim.Key),
			batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld))
		if lock.Semaphore() {
			guard.Annotate(job, batchv1alpha1.AnnotationSlot, slot)
		}
		controllerutil.AddFinalizer(job, finalizer)
		tmpl := &job.Spec.Template.ObjectMeta
		if tmpl.Annotations == nil {
			tmpl.Annotations = map[string]string{}
		}
		tmpl.Annotations[batchv1alpha1.AnnotationFencingToken] = fence
		tmpl.Annotations[batchv1alpha1.AnnotationLock] = p.claimant.Lock.Name
		tmpl.Annotations[batchv1alpha1.AnnotationHolder] = p.claim.Holder
		tmpl.Annotations[batchv1alpha1.AnnotationSlot] = slot
		// A suspended Job that never started may change its pod template's labels: the pods carry
		// it, and the reconciler's pod cache holds them (podCache).
		if tmpl.Labels == nil {
			tmpl.Labels = map[string]string{}
		}
		tmpl.Labels[batchv1alpha1.LabelGuardedJobPod] = batchv1alpha1.GuardedJobPodUnsuspended
		job.Spec.Suspend = ptr.To(false)
	})
	if err != nil {
		return err
	}
	p.obs.fenced, p.obs.suspended, p.obs.hasFinalizer, p.obs.guard = true, false, true, batchv1alpha1.GuardHeld
	msg := p.acquired
	if msg == "" {
		msg = fmt.Sprintf("Holding lock %s with fencing token %d%s", p.claimant.Lock.Name, lock.Fence(), guard.SlotPhrase(lock))
	}
	r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonAcquired, "Acquire", "%s; unsuspended", msg)
	return nil
}

// markScopeNotAllowed records a Job whose namespace may not use Cluster scope: no Redis call was
// made and no holder is named. It stays suspended until the user or the operator's gate changes.
func (r *GuardedJobReconciler) markScopeNotAllowed(ctx context.Context, p *pass) error {
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardScopeNotAllowed); err != nil {
		return err
	}
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonScopeNotAllowed, "Acquire",
		"Lock %s has scope Cluster, which namespace %s may not use (the operator's --cluster-scope-namespaces); the Job stays suspended",
		p.claimant.Lock.Name, p.job.Namespace)
	return nil
}
