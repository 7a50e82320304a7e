package guardedpod

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Acquiring (stepAcquire) and ungating (stepUngate): join the lock's queue, wait or be handed the
// lock, then let the Pod be scheduled under it with one write.

// acquire asks for the lock as a queued waiter, in the queue every kind of the same lock waits in.
func (r *GuardedPodReconciler) acquire(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if res, ask := r.holdings().Asks(p.claim, r.Clock.Now()); !ask {
		return res, false, nil // nothing may have changed since it last asked (guard.Holdings.Asks)
	}
	lock, err := r.holdings().Acquire(ctx, &p.claim, p.claimant, p.workloadOf())
	if refused, ok := errors.AsType[*guard.PermitsRefused](err); ok {
		ctrl.LoggerFrom(ctx).Info("Waiting: the lock declares more permits than Redlock grants", "lock", p.claim.Key, "permits", refused.Permits)
		r.event(p.pod, corev1.EventTypeWarning, batchv1alpha1.ReasonPermitsUnsupported, "Acquire", "%s", refused.Error())
		return ctrl.Result{RequeueAfter: r.Config.WaitBackoffMax}, false, nil
	}
	if errors.Is(err, lockbook.ErrNotAcquired) {
		// Nothing is written while the Pod waits; the release waker wakes it, and it asks again as
		// a guarded Job does (guard.Holdings.Wait).
		now := r.Clock.Now()
		return r.holdings().Wait(p.claim, p.workloadOf(), err, now, now.Sub(p.pod.CreationTimestamp.Time)), false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", p.claim.Key, "fencingToken", lock.Fence(), "slot", lock.Slot())
	p.acquired = fmt.Sprintf("Acquired lock %s with fencing token %d%s", p.claimant.Lock.Name, lock.Fence(), guard.SlotPhrase(lock))
	return ctrl.Result{}, true, nil
}

// ungate lets the Pod be scheduled under the lock, in one optimistic write: the fence, lock, holder
// and slot (which the env vars the admission gate added read), the record, the finalizer, and our
// scheduling gate removed. A gated Pod is never bound and its containers resolve the env when they
// start, after this write, so none ever runs without the fence or with an older one.
func (r *GuardedPodReconciler) ungate(ctx context.Context, p *pass) error {
	lock := p.obs.holding
	fence, slot := strconv.FormatInt(lock.Fence(), 10), strconv.Itoa(lock.Slot())
	err := r.patchPod(ctx, p, "ungate", func(pod *corev1.Pod) {
		guard.Annotate(pod,
			batchv1alpha1.AnnotationFencingToken, fence,
			batchv1alpha1.AnnotationLock, p.claimant.Lock.Name,
			batchv1alpha1.AnnotationHolder, p.claim.Holder,
			batchv1alpha1.AnnotationSlot, slot,
			batchv1alpha1.AnnotationGuardLockKey, r.Locks.RedisKey(p.claim.Key),
			batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld))
		controllerutil.AddFinalizer(pod, guard.Finalizer)
		var gates []corev1.PodSchedulingGate
		for _, g := range pod.Spec.SchedulingGates {
			if g.Name != batchv1alpha1.SchedulingGateGuard {
				gates = append(gates, g)
			}
		}
		pod.Spec.SchedulingGates = gates
	})
	if err != nil {
		return err
	}
	p.obs.fenced, p.obs.gated, p.obs.hasFinalizer, p.obs.guard = true, false, true, batchv1alpha1.GuardHeld
	msg := p.acquired
	if msg == "" {
		msg = fmt.Sprintf("Holding lock %s with fencing token %d%s", p.claimant.Lock.Name, lock.Fence(), guard.SlotPhrase(lock))
	}
	r.event(p.pod, corev1.EventTypeNormal, batchv1alpha1.ReasonAcquired, "Acquire", "%s; ungated", msg)
	return nil
}

// markScopeNotAllowed records a Pod whose namespace may not use Cluster scope: no Redis call was
// made and no holder is named. It stays gated.
func (r *GuardedPodReconciler) markScopeNotAllowed(ctx context.Context, p *pass) error {
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardScopeNotAllowed); err != nil {
		return err
	}
	r.event(p.pod, corev1.EventTypeWarning, batchv1alpha1.ReasonScopeNotAllowed, "Acquire",
		"Lock %s has scope Cluster, which namespace %s may not use (the operator's --cluster-scope-namespaces); the Pod stays gated",
		p.claimant.Lock.Name, p.pod.Namespace)
	return nil
}
