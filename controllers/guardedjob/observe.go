package guardedjob

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
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
	if held, ok := heldLock(job, id, r.Locks.LibraryKey); ok {
		claimant, p.drift = held.over(job, claimant, err)
	} else if err != nil {
		p.obs.invalid = err
		return p
	}
	p.claimant = claimant
	p.claim = lockbook.Claim{Key: id.LockKey(claimant), Token: id.Token(claimant), Holder: id.Holder(claimant), Slot: recordedSlot(job)}
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

// recordedLock is the lock a Job's record says it holds.
type recordedLock struct {
	scope batchv1alpha1.LockScope
	name  string
	key   string // the Redis key recorded
}

// heldLock is the lock a Job was unsuspended under, from its record: our finalizer (added by the
// unsuspend write, removed by the release) and the Redis key recorded beside it. The key counts
// only if it is one the Job could have named itself: a lock of this cluster and, for Namespace
// scope, of the Job's own namespace, so an edited record never points the operator at another
// tenant's lock.
func heldLock(job *batchv1.Job, id locks.Identity, libraryKey func(string) (string, bool)) (recordedLock, bool) {
	recorded := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	if !controllerutil.ContainsFinalizer(job, finalizer) || recorded == "" {
		return recordedLock{}, false
	}
	key, ok := libraryKey(recorded)
	if !ok {
		return recordedLock{}, false
	}
	scope, namespace, name, ok := id.Parse(key)
	if !ok || (scope == batchv1alpha1.LockScopeNamespace && namespace != job.Namespace) {
		return recordedLock{}, false
	}
	return recordedLock{scope: scope, name: name, key: recorded}, true
}

// over makes the claimant of a held Job: it holds the recorded lock until the lock is released,
// whatever its label and annotations say now. The admission gate refuses a change of either, but
// a Job edited while the gate was not in force must still release, re-adopt and lose the lock it
// holds, not one it names now; terms that no longer parse take their defaults. drift says what
// differs, for the user; "" when nothing does.
func (h recordedLock) over(job *batchv1.Job, parsed locks.Claimant, parseErr error) (c locks.Claimant, drift string) {
	if parseErr != nil {
		c = locks.Claimant{Kind: locks.KindJob, Namespace: job.Namespace, Name: job.Name, UID: job.UID, Created: job.CreationTimestamp.Time}
		drift = fmt.Sprintf("The Job's lock cannot be read (%v): it keeps lock %s, which it holds, on the default terms until it ends", parseErr, h.name)
	} else {
		c = parsed
		if c.Lock.Name != h.name || c.Lock.Scope != h.scope {
			drift = fmt.Sprintf("The Job now names lock %s (scope %s): it keeps lock %s (scope %s), which it holds, until it ends",
				c.Lock.Name, c.Lock.Scope, h.name, h.scope)
		}
	}
	c.Lock.Name, c.Lock.Scope = h.name, h.scope
	return c, drift
}

// recordedFence is the fence the Job's record carries; 0, which no acquisition gets, if none (or
// not a number), so a re-adoption never takes it for the lock it finds.
func recordedFence(job *batchv1.Job) int64 {
	fence, err := strconv.ParseInt(job.Annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	if err != nil {
		return 0
	}
	return fence
}

// recordedSlot is the semaphore slot the Job's record carries (nil: a plain lock, slot 0).
func recordedSlot(job *batchv1.Job) *int32 {
	v, ok := job.Annotations[batchv1alpha1.AnnotationSlot]
	if !ok {
		return nil
	}
	slot, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return nil
	}
	s := int32(slot)
	return &s
}

// runningPods counts the pods of the Job that have not stopped (activePods).
func (r *GuardedJobReconciler) runningPods(ctx context.Context, job *batchv1.Job) (int, error) {
	pods, err := r.activePods(ctx, job)
	return len(pods), err
}

// activePods are the pods of the Job that have not stopped, found by the Job's controller-uid
// label (the Job API sets it, and the admission gate refuses a manual selector), from the API
// server. A pod that succeeded or failed runs nothing, so it does not hold the lock back; every
// other pod counts until it is gone, terminating or not.
func (r *GuardedJobReconciler) activePods(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.APIReader.List(ctx, pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	var active []corev1.Pod
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			active = append(active, pod)
		}
	}
	return active, nil
}

// ttlOf is the lease of the Job's lock.
func ttlOf(c locks.Claimant) (ttl time.Duration) {
	if c.Lock.TTL == nil {
		return batchv1alpha1.DefaultLockTTL
	}
	return c.Lock.TTL.Duration
}

// workloadOf is what the lock book knows of the Job: enough to stop it and wake this reconciler.
func (p *pass) workloadOf() lockbook.Workload { return lockbook.WorkloadOf(p.claimant, p.job.Name) }
