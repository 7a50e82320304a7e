package kueuecheck

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Admitting (stepAcquire, stepRecord, stepAdmit, stepReadopt): acquire the Job's lock in the queue,
// record the hold on the Job, then set our check Ready with the fence for Kueue to write into the
// pod template.

// acquire asks for the lock as a queued waiter, in the queue guarded Jobs and LockedJobs of the
// same lock wait in. While it waits nothing is written: the check stays Pending.
func (r *KueueCheckReconciler) acquire(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if res, ask := r.holdings().Asks(p.claim, r.Clock.Now()); !ask {
		return res, false, nil
	}
	lock, err := r.holdings().Acquire(ctx, &p.claim, p.claimant, p.workloadOf())
	if refused, ok := errors.AsType[*guard.PermitsRefused](err); ok {
		if err := r.tell(ctx, p, refused.Error()); err != nil {
			return ctrl.Result{}, false, err
		}
		r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonPermitsUnsupported, "Acquire", "%s", refused.Error())
		return ctrl.Result{RequeueAfter: r.Config.WaitBackoffMax}, false, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		now := r.Clock.Now()
		return r.holdings().Wait(p.claim, p.workloadOf(), err, now, now.Sub(p.job.CreationTimestamp.Time)), false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", p.claim.Key, "fencingToken", lock.Fence(), "slot", lock.Slot())
	return ctrl.Result{}, true, nil
}

// record writes the hold into the Job's annotations, as a guarded Job's, before the check lets
// Kueue start a pod: the fence, holder, lock key and slot, guard Held, and our finalizer, so a
// restarted operator re-adopts the lock and a deleted Job keeps it until its pods are gone. Kueue
// suspends and unsuspends the Job; this write never touches spec.
func (r *KueueCheckReconciler) record(ctx context.Context, p *pass) error {
	lock := p.obs.holding
	err := r.patchJob(ctx, p, "record Held", func(job *batchv1.Job) {
		guard.Annotate(job,
			batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(lock.Fence(), 10),
			batchv1alpha1.AnnotationHolder, p.claim.Holder,
			batchv1alpha1.AnnotationGuardLockKey, r.Locks.RedisKey(p.claim.Key),
			batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld))
		if lock.Semaphore() {
			guard.Annotate(job, batchv1alpha1.AnnotationSlot, strconv.Itoa(lock.Slot()))
		}
		controllerutil.AddFinalizer(job, finalizer)
	})
	if err != nil {
		return err
	}
	p.obs.held, p.obs.hasFinalizer, p.obs.guard = true, true, batchv1alpha1.GuardHeld
	return nil
}

// admit sets our check Ready with the fence, lock, holder and slot for every pod set of the
// Workload, and the label of our pod cache; Kueue writes them into the Job's pod template as it
// unsuspends it. It waits while
// pods of an earlier admission still run (an eviction Kueue has not finished).
func (r *KueueCheckReconciler) admit(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if stopped, err := r.stopped(ctx, p); err != nil || !stopped {
		return ctrl.Result{RequeueAfter: podRecheck}, false, err
	}
	lock := p.obs.holding
	annotations := map[string]any{
		batchv1alpha1.AnnotationFencingToken: strconv.FormatInt(lock.Fence(), 10),
		batchv1alpha1.AnnotationLock:         p.claimant.Lock.Name,
		batchv1alpha1.AnnotationHolder:       p.claim.Holder,
		batchv1alpha1.AnnotationSlot:         strconv.Itoa(lock.Slot()),
	}
	// The label puts the Job's pods in this reconciler's pod cache (kueuePods), so the lock can go
	// at the pod's outcome.
	podLabels := map[string]any{batchv1alpha1.LabelGuardedJobPod: batchv1alpha1.GuardedJobPodKueue}
	var updates []any
	for _, name := range podSetNames(p.workload) {
		updates = append(updates, map[string]any{"name": name, "annotations": annotations, "labels": podLabels})
	}
	msg := fmt.Sprintf("Holding lock %s with fencing token %d%s", p.claimant.Lock.Name, lock.Fence(), guard.SlotPhrase(lock))
	if err := r.setCheck(ctx, p.workload, p.check, stateReady, msg, updates); err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.check = stateReady
	r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonAcquired, "Acquire", "%s; admission check %s Ready", msg, p.check)
	return ctrl.Result{}, false, nil
}

// readopt asks for the lock with the Job's own token, outside the queue (guard.Holdings.Readopt).
func (r *KueueCheckReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lock, lost, released, err := r.holdings().Readopt(ctx, &p.claim, p.claimant, p.workloadOf(), guard.RecordedFence(p.job))
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding, p.obs.lost, p.obs.released = lock, lost, released
	if lost == nil && !released {
		ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
		r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", p.claimant.Lock.Name, lock.Fence())
	}
	return ctrl.Result{}, true, nil
}
