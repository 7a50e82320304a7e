package kueuecheck

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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

// act carries out one step; next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *KueueCheckReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle, stepRunning:
		// A running Job needs no pass until something changes: the Job or its Workload (watched), or
		// the lock (the book renews it and reports a loss).
		return ctrl.Result{}, false, nil
	case stepInvalid:
		r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Acquire",
			"The Job's lock cannot be read, so its admission check stays Pending: %v", p.obs.invalid)
		return ctrl.Result{}, false, nil
	case stepDone:
		r.Locks.Forget(p.job.UID)
		p.obs.lost, p.obs.released = nil, false
		return ctrl.Result{}, true, nil
	case stepGiveUp:
		return ctrl.Result{}, false, r.giveUp(ctx, p)
	case stepDropFinalizer:
		return ctrl.Result{}, false, r.dropFinalizer(ctx, p)
	case stepScopeNotAllowed:
		return ctrl.Result{}, false, r.markScopeNotAllowed(ctx, p)
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepRecord:
		return ctrl.Result{}, true, r.record(ctx, p)
	case stepAdmit:
		return r.admit(ctx, p)
	case stepReadopt:
		return r.readopt(ctx, p)
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p)
	case stepReleaseAfterLoss:
		return r.releaseAfterLoss(ctx, p)
	case stepRelease:
		return r.release(ctx, p)
	case stepUnguarded:
		return ctrl.Result{}, false, r.markUnguarded(ctx, p)
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}

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
// Workload; Kueue writes them into the Job's pod template as it unsuspends it. It waits while
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
	var updates []any
	for _, name := range podSetNames(p.workload) {
		updates = append(updates, map[string]any{"name": name, "annotations": annotations})
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
	lock, lost, err := r.holdings().Readopt(ctx, &p.claim, p.claimant, p.workloadOf(), guard.RecordedFence(p.job))
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.obs.holding, p.obs.lost = lock, lost
	if lost == nil {
		ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.claim.Key, "fencingToken", lock.Fence())
		r.event(p.job, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", p.claimant.Lock.Name, lock.Fence())
	}
	return ctrl.Result{}, true, nil
}

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

// release gives the lock back once the Job is stopped (ended, evicted and suspended by Kueue, or
// deleted and its pods gone), then records Released and drops the finalizer. A release that finds
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
	r.event(p.job, eventType, reason, "Release", "Lock %s (fencing token %d): %s", p.claimant.Lock.Name, guard.RecordedFence(p.job), state)
	return ctrl.Result{}, false, nil
}

// stopped reports whether none of the Job's pods runs and none can start: the Job ended, or Kueue
// suspended it, or it is being deleted (whose pods are deleted here, as the guarded-Job reconciler
// does: nobody else stops them while our finalizer keeps the Job).
func (r *KueueCheckReconciler) stopped(ctx context.Context, p *pass) (bool, error) {
	if !p.obs.finished && !p.obs.suspended && !p.obs.deleting {
		return false, nil
	}
	if p.obs.finished {
		return true, nil // its terminal condition says none of its pods runs (reconcile.JobFinished)
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

// patchJob applies change to the pass's Job and writes the difference, by an optimistic merge
// patch: a pass that read a stale Job writes nothing.
func (r *KueueCheckReconciler) patchJob(ctx context.Context, p *pass, what string, change func(*batchv1.Job)) error {
	base := p.job.DeepCopy()
	change(p.job)
	if err := r.Client.Patch(ctx, p.job, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("%s: patch job %s: %w", what, p.job.Name, err)
	}
	return nil
}

// recordGuard writes the guard state, and drops the finalizer if asked.
func (r *KueueCheckReconciler) recordGuard(ctx context.Context, p *pass, g batchv1alpha1.GuardState, dropFinalizer bool) error {
	err := r.patchJob(ctx, p, "record "+string(g), func(job *batchv1.Job) {
		guard.Annotate(job, batchv1alpha1.AnnotationGuard, string(g))
		if dropFinalizer {
			controllerutil.RemoveFinalizer(job, finalizer)
		}
	})
	if err != nil {
		return err
	}
	p.obs.guard, p.obs.held = g, false
	if dropFinalizer {
		p.obs.hasFinalizer = false
	}
	return nil
}

// tell says in our Pending check's message why it stays Pending, where Kueue's users look
// (kubectl describe workload); a message already there is not written again.
func (r *KueueCheckReconciler) tell(ctx context.Context, p *pass, msg string) error {
	if p.workload == nil || p.check == "" || messageOf(p.workload, p.check) == msg {
		return nil
	}
	return r.setCheck(ctx, p.workload, p.check, statePending, msg, nil)
}

// setCheck writes the state of our check on the Workload, keeping the others, by an optimistic
// merge patch of its status: a pass that read a stale Workload writes nothing.
func (r *KueueCheckReconciler) setCheck(ctx context.Context, wl *unstructured.Unstructured, check, state, msg string, updates []any) error {
	base := wl.DeepCopy()
	states := checkStates(wl)
	list := make([]any, 0, len(states))
	for _, st := range states {
		if st["name"] == check {
			if st["state"] != state {
				st["lastTransitionTime"] = metav1.Now().UTC().Format(time.RFC3339)
			}
			st["state"], st["message"] = state, msg
			if updates != nil {
				st["podSetUpdates"] = updates
			} else {
				delete(st, "podSetUpdates")
			}
		}
		list = append(list, st)
	}
	if err := unstructured.SetNestedSlice(wl.Object, list, "status", "admissionChecks"); err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, wl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set admission check %s of workload %s %s: %w", check, wl.GetName(), state, err)
	}
	return nil
}
