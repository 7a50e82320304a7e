package guardedpod

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Ending (stepFinish, stepLoseLock, stepReleaseAfterLoss, stepDeleteRelease, stepUnguarded): release
// the lock once the Pod runs nothing, apply the on-lock-lost policy when it is lost, never hold for
// a Pod that runs without us.

// finish releases the lock of a Pod that succeeded or failed, then records Released and drops the
// finalizer in one write. A release that finds the lock not ours records Lost.
func (r *GuardedPodReconciler) finish(ctx context.Context, p *pass) error {
	fence := guard.RecordedFence(p.pod)
	state, eventType, reason := batchv1alpha1.GuardReleased, corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete
	msg := fmt.Sprintf("Pod %s succeeded; released lock %s (fencing token %d)", p.pod.Name, p.claimant.Lock.Name, fence)
	if p.pod.Status.Phase == corev1.PodFailed {
		eventType, reason = corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed
		msg = fmt.Sprintf("Pod %s failed: %s %s; released lock %s (fencing token %d)", p.pod.Name, p.pod.Status.Reason, p.pod.Status.Message, p.claimant.Lock.Name, fence)
	}
	if !p.obs.released {
		err := r.release(ctx, p)
		if errors.Is(err, lockbook.ErrNotHeld) {
			r.Locks.MarkLost(p.workloadOf(), err)
			state, eventType, reason = batchv1alpha1.GuardLost, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost
			msg = fmt.Sprintf("Lock %s (fencing token %d) was not ours when the Pod ended; another holder may have run during the Pod", p.claimant.Lock.Name, fence)
		} else if err != nil {
			return err
		}
	}
	if err := r.recordEnd(ctx, p, state); err != nil {
		return err
	}
	r.event(p.pod, eventType, reason, "Finish", "%s", msg)
	r.Locks.Forget(p.pod.UID)
	return nil
}

// end lets a Pod go that runs nothing: it releases what is still ours and records g with the
// finalizer dropped.
func (r *GuardedPodReconciler) end(ctx context.Context, p *pass, g batchv1alpha1.GuardState) error {
	if err := r.release(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
		return err
	}
	if err := r.recordEnd(ctx, p, g); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Locks.Forget(p.pod.UID)
	return nil
}

// deleteRelease lets a deleted Pod go once it runs nothing: release (if ours), drop the finalizer.
func (r *GuardedPodReconciler) deleteRelease(ctx context.Context, p *pass) error {
	if !ended(p.obs.guard) || p.obs.holding != nil {
		if err := r.release(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return err
		}
	}
	err := r.patchPod(ctx, p, "remove finalizer", func(pod *corev1.Pod) { controllerutil.RemoveFinalizer(pod, guard.Finalizer) })
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Locks.Forget(p.pod.UID)
	return nil
}

// recordEnd writes an end and drops the finalizer.
func (r *GuardedPodReconciler) recordEnd(ctx context.Context, p *pass, g batchv1alpha1.GuardState) error {
	return r.patchPod(ctx, p, "record "+string(g), func(pod *corev1.Pod) {
		guard.Annotate(pod, batchv1alpha1.AnnotationGuard, string(g))
		controllerutil.RemoveFinalizer(pod, guard.Finalizer)
	})
}

// release gives the lock back by compare-and-delete with the Pod's token. It returns ErrNotHeld when
// the lock was not ours.
func (r *GuardedPodReconciler) release(ctx context.Context, p *pass) error {
	if err := r.holdings().Release(ctx, p.claim, p.workloadOf()); err != nil {
		return err
	}
	p.obs.released, p.obs.holding = true, nil
	ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
	return nil
}

// loseLock applies the on-lock-lost policy to the Pod of a lost (or at-risk) lock and records Lost.
// The lock is released, if still ours, once the Pod runs nothing (stepReleaseAfterLoss, or the
// deletion's stepDeleteRelease).
func (r *GuardedPodReconciler) loseLock(ctx context.Context, p *pass) error {
	policy := p.claimant.Lock.OnLockLostOrDefault()
	if !p.obs.ended && !p.obs.deleting {
		if err := r.stopPod(ctx, p.pod, policy); err != nil {
			return err
		}
	}
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardLost); err != nil {
		return err
	}
	applied := string(policy)
	if policy == batchv1alpha1.LockLostSuspend {
		applied = "Suspend (a Pod cannot be suspended: it was deleted)"
	}
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", p.claim.Key, "reason", p.obs.lost.Error(), "policy", policy)
	r.event(p.pod, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock",
		"Lock %s lost while the Pod ran (%v); policy %s applied", p.claimant.Lock.Name, p.obs.lost, applied)
	return nil
}

// stopPod applies a lock-lost policy to a running Pod: Suspend and Delete delete it (its containers
// get their grace period; our finalizer keeps it until they stopped), Ignore leaves it.
func (r *GuardedPodReconciler) stopPod(ctx context.Context, pod *corev1.Pod, policy batchv1alpha1.LockLostPolicy) error {
	if policy == batchv1alpha1.LockLostIgnore || !pod.DeletionTimestamp.IsZero() {
		return nil
	}
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// stopWorkload is the lock book's way to stop the Pod of a lost lock at once.
func (r *GuardedPodReconciler) stopWorkload(ctx context.Context, w lockbook.Workload, cause error) {
	pod, err := r.getPod(ctx, w.Object)
	if err == nil && pod != nil && pod.UID == w.UID && !podEnded(pod) {
		err = r.stopPod(ctx, pod, w.Policy)
	}
	if err != nil {
		ctrl.Log.WithName("lockbook").Error(err, "Stopping the guarded Pod of a lost lock failed; the reconciler retries",
			"Pod", klog.KRef(w.Object.Namespace, w.Object.Name), "cause", cause.Error())
	}
}

// markUnguarded records a labelled Pod that runs, or may run, without our lock: never a holder; a
// lock the book holds for it, or a place in line, is given back.
func (r *GuardedPodReconciler) markUnguarded(ctx context.Context, p *pass) error {
	released, err := r.holdings().Unguard(ctx, p.claim, p.workloadOf(), p.obs.holding != nil, p.obs.scopeAllowed,
		func() error { return r.recordGuard(ctx, p, batchv1alpha1.GuardUnguarded) })
	if released {
		p.obs.released, p.obs.holding = true, nil
		ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
	}
	if err != nil {
		return err
	}
	r.event(p.pod, corev1.EventTypeWarning, batchv1alpha1.ReasonUnguarded, "Acquire", "%s", guard.UnguardedNote(locks.KindPod, p.claimant.Lock.Name,
		"was not held back for it: it was created without the admission gate's scheduling gate, or labelled later"))
	return nil
}
