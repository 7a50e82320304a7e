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

// observe builds the pass: who the Job is to the lock, and what the Job and the book say. It reads
// nothing from Redis or the API server.
func (r *GuardedJobReconciler) observe(job *batchv1.Job) *pass {
	p := &pass{job: job}
	id := r.Config.Identity
	claimant, err := locks.ClaimantOfJob(job)
	if held, ok := guard.HeldLock(job, id, r.Locks.LibraryKey); ok {
		claimant, p.drift = held.Over(locks.KindJob, job, claimant, err)
	} else if err != nil {
		p.obs.invalid = err
		return p
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
	return p
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
