package kueuecheck

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Observing: the Job's record, its Workload and our check on it (from the manager's cache), the
// lock book and, for a Job that runs under the lock, whether its pods settled its outcome (from
// the reconciler's pod cache). No Redis call.

// observe builds the pass.
func (r *KueueCheckReconciler) observe(ctx context.Context, job *batchv1.Job) (*pass, error) {
	p := &pass{job: job}
	id := r.Config.Identity
	claimant, err := locks.ClaimantOfJob(job)
	recorded, held := guard.HeldLock(job, id, r.Locks.LibraryKey)
	if held {
		// The lock it holds, whatever its label says now (the gate refuses a change of either).
		claimant, _ = recorded.Over(locks.KindJob, job, claimant, err)
		err = nil
	}
	p.obs.invalid = err
	if err == nil {
		p.claimant = claimant
		p.claim = lockbook.Claim{Key: id.LockKey(claimant), Token: id.Token(claimant), Holder: id.Holder(claimant), Slot: guard.RecordedSlot(job), Fence: guard.RecordedFence(job)}
	}
	wl, check, err := r.workloadOfJob(ctx, job)
	if err != nil {
		return nil, err
	}
	p.workload, p.check = wl, check
	book := r.Locks.RecordOf(job.UID)
	guardState := batchv1alpha1.GuardState(job.Annotations[batchv1alpha1.AnnotationGuard])
	p.obs = observation{
		invalid:      p.obs.invalid,
		deleting:     !job.DeletionTimestamp.IsZero(),
		hasFinalizer: hasFinalizer(job),
		suspended:    job.Spec.Suspend != nil && *job.Spec.Suspend,
		finished:     reconcile.JobFinished(job),
		held:         held && guardState == batchv1alpha1.GuardHeld,
		guard:        guardState,
		scopeAllowed: p.obs.invalid == nil && r.Config.ClusterScopeNamespaces.Allows(claimant),
		holding:      book.Lock,
		lost:         book.Lost,
		released:     book.Released,
	}
	if wl != nil {
		p.obs.workload = true
		p.obs.workloadFinished = conditionTrue(wl, conditionFinished)
		p.obs.quotaReserved = conditionTrue(wl, conditionQuotaReserved)
		p.obs.admitted = conditionTrue(wl, conditionAdmitted)
		p.obs.check = stateOf(wl, check)
	}
	if r.Pods != nil && mayHoldRunning(p.obs) && reconcile.SettlesOnPods(job) {
		pods, err := reconcile.PodsOfJob(ctx, r.Pods, job)
		if err != nil {
			return nil, err
		}
		p.obs.settled = reconcile.OutcomeSettled(job, pods)
	}
	return p, nil
}

// mayHoldRunning reports a Job that Kueue may run under a lock it still holds (our check Ready,
// so the pod template carries our label): only then is there a lock to give back at the pod's
// outcome.
func mayHoldRunning(o observation) bool {
	return o.held && o.check == stateReady && !o.deleting && !o.finished && !o.released && o.lost == nil
}

// workloadOfJob is the Workload the Job controls (Kueue makes one per Job) and the name of the
// first of its admission checks that is ours, or nil and "".
func (r *KueueCheckReconciler) workloadOfJob(ctx context.Context, job *batchv1.Job) (*unstructured.Unstructured, string, error) {
	list := newList(KindWorkload)
	if err := r.Kueue.List(ctx, list, client.InNamespace(job.Namespace)); err != nil {
		return nil, "", fmt.Errorf("list workloads of job %s: %w", job.Name, err)
	}
	for i := range list.Items {
		wl := &list.Items[i]
		ref, ok := controllerJobOf(wl)
		if !ok || ref.UID != job.UID || !wl.GetDeletionTimestamp().IsZero() {
			continue
		}
		for _, st := range checkStates(wl) {
			name, _ := st["name"].(string)
			ours, err := r.isOurs(ctx, name)
			if err != nil {
				return nil, "", err
			}
			if ours {
				return wl, name, nil
			}
		}
		return wl, "", nil
	}
	return nil, "", nil
}

// isOurs reports whether the AdmissionCheck name is of our controller.
func (r *KueueCheckReconciler) isOurs(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return false, nil
	}
	ac := newObject(KindAdmissionCheck)
	if err := r.Kueue.Get(ctx, client.ObjectKey{Name: name}, ac); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("get admission check %s: %w", name, err)
	}
	controller, _, _ := unstructured.NestedString(ac.Object, "spec", "controllerName")
	return controller == ControllerName, nil
}

// messageOf is the message of the check name on Workload wl, or "".
func messageOf(wl *unstructured.Unstructured, name string) string {
	for _, st := range checkStates(wl) {
		if name != "" && st["name"] == name {
			m, _ := st["message"].(string)
			return m
		}
	}
	return ""
}

// stateOf is the state of the check name on Workload wl, or "".
func stateOf(wl *unstructured.Unstructured, name string) string {
	if name == "" {
		return ""
	}
	for _, st := range checkStates(wl) {
		if st["name"] == name {
			s, _ := st["state"].(string)
			return s
		}
	}
	return ""
}
