package guardedjob

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Observing: what a pass reads before it decides (the Job's record, the lock book) and, in the
// steps that need it, the Job's pods.

// observe builds the pass: who the Job is to the lock, what the Job and the book say, and, for a
// Job that runs under the lock, whether its pods settled its outcome. It reads nothing from Redis
// or the API server.
func (r *GuardedJobReconciler) observe(ctx context.Context, job *batchv1.Job) (*pass, error) {
	p := &pass{job: job}
	id := r.Config.Identity
	claimant, err := locks.ClaimantOfJob(job)
	if held, ok := guard.HeldLock(job, id, r.Locks.LibraryKey); ok {
		claimant, p.drift = held.Over(locks.KindJob, job, claimant, err)
	} else if err != nil {
		p.obs.invalid = err
		return p, nil
	}
	p.claimant = claimant
	p.claim = lockbook.Claim{Key: id.LockKey(claimant), Token: id.Token(claimant), Holder: id.Holder(claimant), Slot: guard.RecordedSlot(job), Fence: guard.RecordedFence(job)}
	book := r.Locks.RecordOf(job.UID)
	_, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]
	p.obs = observation{
		deleting:     !job.DeletionTimestamp.IsZero(),
		hasFinalizer: controllerutil.ContainsFinalizer(job, finalizer),
		suspended:    job.Spec.Suspend != nil && *job.Spec.Suspend,
		finished:     reconcile.JobFinished(job),
		fenced:       fenced,
		guard:        batchv1alpha1.GuardState(job.Annotations[batchv1alpha1.AnnotationGuard]),
		scopeAllowed: r.Config.ClusterScopeNamespaces.Allows(claimant),
		holding:      book.Lock,
		lost:         book.Lost,
		released:     book.Released,
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

// mayHoldRunning reports a Job that may run under a lock it still holds: only then is there a lock
// to give back at the pod's outcome.
func mayHoldRunning(o observation) bool {
	return o.fenced && !o.deleting && !o.finished && !o.released && o.lost == nil && o.guard == batchv1alpha1.GuardHeld
}

// runningPods counts the pods of the Job that have not stopped (activePods).
func (r *GuardedJobReconciler) runningPods(ctx context.Context, job *batchv1.Job) (int, error) {
	pods, err := r.activePods(ctx, job)
	return len(pods), err
}

// activePods are the pods of the Job that have not stopped (guard.ActivePods), from the API server.
func (r *GuardedJobReconciler) activePods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	return guard.ActivePods(ctx, r.APIReader, job)
}

// workloadOf is what the lock book knows of the Job: enough to stop it and wake this reconciler.
func (p *pass) workloadOf() lockbook.Workload { return lockbook.WorkloadOf(p.claimant, p.job.Name) }
