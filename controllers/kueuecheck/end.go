package kueuecheck

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Ending: send the Workload of a lost lock back, release once the Job is stopped, and never hold
// for a Job that may not, or does not, ask through our check.

// loseLock sends the Workload back (check Retry; Kueue evicts it, suspends the Job and takes the
// fence out of its pod template), if the book's stop has not already, and records Lost. The lock is
// released, if it is still ours, only once the Job's pods are gone (stepReleaseAfterLoss).
func (r *KueueCheckReconciler) loseLock(ctx context.Context, p *pass) error {
	if p.claimant.Lock.OnLockLostOrDefault() != batchv1alpha1.LockLostIgnore {
		if err := r.retry(ctx, p.workload, p.check, p.obs.lost); err != nil {
			return err
		}
	}
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardLost, false); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", p.claim.Key, "reason", p.obs.lost.Error())
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock",
		"Lock %s lost (%v); admission check %s set to Retry", p.claimant.Lock.Name, p.obs.lost, p.check)
	return nil
}

// retry sets the check Retry if it is Ready: only then may Kueue have let pods run. A check that
// is Pending (reset by Kueue after the eviction, or never set Ready) admits nothing; setting it
// Retry again would count as one more retry, which Kueue backs off. It reads the Workload from the
// API server, not the cache: a cache that has not seen our own Ready yet must not leave a Job
// running under a lost lock. The write is optimistic, so a Workload Kueue changed since is not
// written.
func (r *KueueCheckReconciler) retry(ctx context.Context, wl *unstructured.Unstructured, check string, cause error) error {
	if wl == nil || check == "" {
		return nil
	}
	if cause == nil {
		cause = lockbook.ErrLockLost // a Lost record read back after a restart
	}
	fresh := newObject(KindWorkload)
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(wl), fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if stateOf(fresh, check) != stateReady {
		return nil
	}
	return r.setCheck(ctx, fresh, check, stateRetry, fmt.Sprintf("Lock lost: %v", cause), nil)
}

// releaseAfterLoss lets a Lost Job go once it is stopped: it gives back what is still ours (a lease
// at risk is still held, and covers the pods until they are gone) and drops the finalizer.
func (r *KueueCheckReconciler) releaseAfterLoss(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if stopped, err := r.stopped(ctx, p); err != nil || !stopped {
		if err != nil {
			return ctrl.Result{}, false, err
		}
		if p.claimant.Lock.OnLockLostOrDefault() == batchv1alpha1.LockLostIgnore {
			return ctrl.Result{}, false, nil // its pods run on; the Job's end wakes this pass
		}
		// Until Kueue stopped the Job, the check must say Retry (a no-op once it does not say Ready).
		if err := r.retry(ctx, p.workload, p.check, p.obs.lost); err != nil {
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{RequeueAfter: podRecheck}, false, nil
	}
	if _, err := r.holdings().GiveBack(ctx, p.claim, p.workloadOf(), p.obs.holding != nil); err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding = nil
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardLost, true); err != nil {
		return ctrl.Result{}, false, err
	}
	return ctrl.Result{}, false, nil
}

// release gives the lock back once the Job is stopped (ended or its pod succeeded, evicted and
// suspended by Kueue, or deleted and its pods gone), then records Released and drops the finalizer. A release that finds
// the lock not ours means it was lost while the Job ran: the record says Lost.
func (r *KueueCheckReconciler) release(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	if stopped, err := r.stopped(ctx, p); err != nil || !stopped {
		return ctrl.Result{RequeueAfter: podRecheck}, false, err
	}
	state := batchv1alpha1.GuardReleased
	if !p.obs.released {
		err := r.holdings().Release(ctx, p.claim, p.workloadOf())
		if errors.Is(err, lockbook.ErrNotHeld) {
			r.Locks.MarkLost(p.workloadOf(), err)
			state = batchv1alpha1.GuardLost
		} else if err != nil {
			return ctrl.Result{}, false, err
		}
	}
	if err := r.recordGuard(ctx, p, state, true); err != nil {
		return ctrl.Result{}, false, client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key, "guard", state)
	eventType, reason := corev1.EventTypeNormal, batchv1alpha1.ReasonReleased
	if state == batchv1alpha1.GuardLost {
		eventType, reason = corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost
	}
	msg := fmt.Sprintf("Lock %s (fencing token %d): %s", p.claimant.Lock.Name, guard.RecordedFence(p.job), state)
	if p.obs.settled && state == batchv1alpha1.GuardReleased {
		msg = fmt.Sprintf("The pod of Job %s succeeded; released lock %s (fencing token %d)", p.job.Name, p.claimant.Lock.Name, guard.RecordedFence(p.job))
	}
	r.event(p.job, eventType, reason, "Release", "%s", msg)
	return ctrl.Result{}, false, nil
}

// stopped reports whether none of the Job's pods runs and none can start: the Job ended or its pod
// succeeded, or Kueue suspended it, or it is being deleted (whose pods are deleted here, as the guarded-Job reconciler
// does: nobody else stops them while our finalizer keeps the Job).
func (r *KueueCheckReconciler) stopped(ctx context.Context, p *pass) (bool, error) {
	if p.obs.finished || p.obs.settled {
		// Its terminal condition (reconcile.JobFinished), or its settled pods
		// (reconcile.OutcomeSettled), say none of its pods runs or will.
		return true, nil
	}
	if !p.obs.suspended && !p.obs.deleting {
		return false, nil
	}
	pods, err := guard.ActivePods(ctx, r.APIReader, p.job)
	if err != nil {
		return false, err
	}
	if len(pods) == 0 {
		return true, nil
	}
	if p.obs.deleting && !controllerutil.ContainsFinalizer(p.job, metav1.FinalizerOrphanDependents) {
		for i := range pods {
			pod := &pods[i]
			if ref := metav1.GetControllerOf(pod); !pod.DeletionTimestamp.IsZero() || ref == nil || ref.UID != p.job.UID {
				continue
			}
			ctrl.LoggerFrom(ctx).Info("Deleting a pod of the deleted Job", "pod", klog.KObj(pod))
			if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
				return false, fmt.Errorf("delete pod %s of job %s: %w", pod.Name, p.job.Name, err)
			}
		}
	}
	return false, nil
}

// giveUp leaves the queue for a Job that no longer asks (its quota went, it ended or was
// deleted), if it waited in it, and releases a lock acquired for it that was never recorded.
func (r *KueueCheckReconciler) giveUp(ctx context.Context, p *pass) error {
	if p.obs.invalid != nil || (p.obs.holding == nil && !r.waiting.Knows(p.claim.Holder)) {
		return nil
	}
	_, err := r.holdings().GiveBack(ctx, p.claim, p.workloadOf(), p.obs.holding != nil)
	p.obs.holding = nil
	return err
}

// dropFinalizer lets a deleted Job that holds nothing go.
func (r *KueueCheckReconciler) dropFinalizer(ctx context.Context, p *pass) error {
	if err := r.giveUp(ctx, p); err != nil {
		return err
	}
	err := r.patchJob(ctx, p, "remove finalizer", func(job *batchv1.Job) { controllerutil.RemoveFinalizer(job, finalizer) })
	return client.IgnoreNotFound(err)
}

// markScopeNotAllowed tells why a Job whose namespace may not use Cluster scope is not admitted:
// in our check's message, where Kueue's users look, and in an Event; then records it. No Redis call
// was made and the check stays Pending. The check is written before the record, whose presence
// ends these passes, so a failed write is tried again.
func (r *KueueCheckReconciler) markScopeNotAllowed(ctx context.Context, p *pass) error {
	msg := fmt.Sprintf("Lock %s has scope Cluster, which namespace %s may not use (the operator's --cluster-scope-namespaces)",
		p.claimant.Lock.Name, p.job.Namespace)
	if err := r.tell(ctx, p, msg); err != nil {
		return err
	}
	if err := r.recordGuard(ctx, p, batchv1alpha1.GuardScopeNotAllowed, false); err != nil {
		return err
	}
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonScopeNotAllowed, "Acquire", "%s; its admission check stays Pending", msg)
	return nil
}

// markUnguarded records a Job that Kueue admitted without our check (its ClusterQueue lists no
// AdmissionCheck of ours): it runs, or ran, without the lock, as a guarded Job that someone else
// unsuspended. It is left running (Kueue admitted it, and it may be half through its work) and is
// never a holder: what the book holds for it, or its place in line, is given back
// (guard.Holdings.Unguard), and the user is told why on the Job.
func (r *KueueCheckReconciler) markUnguarded(ctx context.Context, p *pass) error {
	released, err := r.holdings().Unguard(ctx, p.claim, p.workloadOf(), p.obs.holding != nil, p.obs.scopeAllowed,
		func() error { return r.recordGuard(ctx, p, batchv1alpha1.GuardUnguarded, false) })
	if released {
		p.obs.released, p.obs.holding = true, nil
		ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.claim.Key)
	}
	if err != nil {
		return err
	}
	cq := "(unknown)"
	if p.workload != nil && clusterQueueOf(p.workload) != "" {
		cq = clusterQueueOf(p.workload)
	}
	ctrl.LoggerFrom(ctx).Info("Kueue admitted a locked Job without our admission check", "lock", p.claimant.Lock.Name, "clusterQueue", cq)
	r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonUnguarded, "Acquire", "%s", guard.UnguardedNote(locks.KindJob, p.claimant.Lock.Name,
		fmt.Sprintf("runs without it: Kueue admitted it through ClusterQueue %s, which lists no AdmissionCheck of controller %s", cq, ControllerName)))
	return nil
}

// stopWorkload is the lock book's way to send the Workload of a lost lock back at once, without
// waiting for a reconcile worker: its check goes to Retry. The pass that runs afterwards records
// Lost. Policy Ignore leaves it admitted.
func (r *KueueCheckReconciler) stopWorkload(ctx context.Context, w lockbook.Workload, cause error) {
	job, err := r.getJob(ctx, w.Object)
	if err == nil && job != nil && job.UID == w.UID {
		var wl *unstructured.Unstructured
		var check string
		if wl, check, err = r.workloadOfJob(ctx, job); err == nil {
			err = r.retry(ctx, wl, check, cause)
		}
	}
	if err != nil {
		ctrl.Log.WithName("lockbook").Error(err, "Setting the admission check of a lost lock to Retry failed; the reconciler retries",
			"Job", klog.KRef(w.Object.Namespace, w.Object.Name), "cause", cause.Error())
	}
}
