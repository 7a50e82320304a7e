/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

const (
	// finalizer keeps a LockedJob until its lock is released and its Job's pods are gone.
	finalizer = "batch.lockedjob.dev/release-lock"
	// indexLockKey indexes LockedJobs by the Redis key of their lock, for wake-ups on release.
	indexLockKey = "status.lockKey"

	defaultTTL = 30 * time.Second
)

// Config is the operator-wide behaviour of the reconciler.
type Config struct {
	// Identity derives lock keys, holder names and tokens.
	Identity Identity
	// ClusterScopeNamespaces may use spec.lock.scope Cluster; "*" allows every namespace.
	ClusterScopeNamespaces []string
	// StatusInterval bounds how often renewedAt/expiresAt are written per LockedJob (Redis is the
	// authority; status is for humans), default 30s.
	StatusInterval time.Duration
	// WaitBackoffMin and WaitBackoffMax bound the jittered re-check of a waiting LockedJob, the safety
	// net behind release wake-ups. Defaults 1s and 15s.
	WaitBackoffMin, WaitBackoffMax time.Duration
	// MaxConcurrentReconciles is how many LockedJobs are reconciled at once (default 1).
	MaxConcurrentReconciles int
}

func (c *Config) defaults() {
	if c.StatusInterval <= 0 {
		c.StatusInterval = 30 * time.Second
	}
	if c.WaitBackoffMin <= 0 {
		c.WaitBackoffMin = time.Second
	}
	if c.WaitBackoffMax < c.WaitBackoffMin {
		c.WaitBackoffMax = max(15*time.Second, c.WaitBackoffMin)
	}
}

// waiterLiveness is how long a waiter stays queued in Redis without asking again: well past the
// longest backoff, so only a waiter whose operator stopped drops out.
func (c *Config) waiterLiveness() time.Duration { return 4*c.WaitBackoffMax + 30*time.Second }

// LockedJobReconciler reconciles a LockedJob: it obtains the lock, runs the Job under it, and
// releases the lock when the Job ends or the LockedJob is deleted.
type LockedJobReconciler struct {
	client.Client
	// APIReader reads uncached, for the rare pod listing while stopping a Job.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Locks     *LockBook
	Config    Config
	Clock     clock.PassiveClock

	pending pendingSet
}

// scope is what one pass of Reconcile observed and is changing.
type scope struct {
	lj     *batchv1alpha1.LockedJob
	before *batchv1alpha1.LockedJob // base of the status patch
	key    string                   // the lock's name in the lock library
	job    *batchv1.Job             // the Job created under the lock, if any
}

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get,resourceNames=kube-system

// Reconcile observes the LockedJob, its Job and its lock, decides the next step of the state
// machine (finalizer → wait/acquire → create Job → renew → release), acts, and records status in
// one patch at the end.
func (r *LockedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, req.NamespacedName, lj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("LockedJob", klog.KObj(lj))
	ctx = ctrl.LoggerInto(ctx, log)

	// Nothing is acquired before the finalizer that will release it is stored.
	if lj.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(lj, finalizer) {
		base := lj.DeepCopy()
		controllerutil.AddFinalizer(lj, finalizer)
		return ctrl.Result{}, r.Patch(ctx, lj, client.MergeFrom(base))
	}

	s := &scope{lj: lj, before: lj.DeepCopy(), key: r.Config.Identity.LockKey(lj)}
	defer func() {
		if err := r.patchStatus(ctx, s, reterr); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	if err := r.observeJob(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if !lj.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *LockedJobReconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	lj := s.lj
	if isTerminal(lj.Status.Phase) {
		// Finished. Only a lock still recorded as held (a release that failed) needs work.
		if r.Locks.Held(lj.UID) != nil || conditionTrue(lj, batchv1alpha1.ConditionLockAcquired) {
			return ctrl.Result{}, r.release(ctx, s)
		}
		return ctrl.Result{}, nil
	}
	if lj.Spec.Lock.Scope == batchv1alpha1.LockScopeCluster && !r.clusterScopeAllowed(lj.Namespace) {
		r.markScopeNotAllowed(s)
		return ctrl.Result{}, nil // the user must act; retrying changes nothing
	}
	lj.Status.LockKey = r.Locks.Redis().RedisKey(s.key)
	if lj.Status.Phase == "" {
		lj.Status.Phase = batchv1alpha1.PhasePending
	}

	// A loss is checked before a finished Job on purpose: we cannot tell whether the lock was lost
	// before or after the Job's last write, so LockLost is the honest outcome.
	if cause := r.Locks.Lost(lj.UID); cause != nil {
		return r.handleLockLost(ctx, s, cause)
	}
	if s.job != nil && jobFinished(s.job) {
		return r.finish(ctx, s)
	}
	lock := r.Locks.Held(lj.UID)
	if lock == nil && lj.Status.FencingToken != nil {
		// We held it before (a restart, a new leader): pick it up again, or learn that it is gone.
		return r.readopt(ctx, s)
	}
	if lock == nil {
		return r.acquire(ctx, s)
	}
	return r.runJob(ctx, s, lock)
}

// acquire tries to take the lock, or records why the LockedJob waits.
func (r *LockedJobReconciler) acquire(ctx context.Context, s *scope) (ctrl.Result, error) {
	lj, now := s.lj, r.Clock.Now()
	if lj.Status.WaitingSince == nil {
		lj.Status.WaitingSince = &metav1.Time{Time: now}
	}
	waited := now.Sub(lj.Status.WaitingSince.Time)
	if t := lj.Spec.Lock.AcquireTimeout; t != nil && waited >= t.Duration {
		return ctrl.Result{}, r.giveUp(ctx, s, t.Duration)
	}

	id := r.Config.Identity
	lock, err := r.Locks.Redis().Obtain(ctx, s.key, ttlOf(lj),
		redislock.WithToken(id.Token(lj)),
		redislock.WithMetadata(id.Holder(lj)),
		redislock.WithQueue(id.Holder(lj), id.QueueScore(lj), r.Config.waiterLiveness()))
	if errors.Is(err, redislock.ErrNotObtained) {
		return r.wait(s, err, waited)
	}
	if err != nil {
		return ctrl.Result{}, r.redisDown(s, fmt.Errorf("acquire %s: %w", s.key, err))
	}

	r.redisUp(s)
	r.pending.mark(lj.UID, false)
	locksTakenTotal.Inc()
	lockWaitSeconds.Observe(waited.Seconds())
	if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, fmt.Errorf("renew %s: %w", s.key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", s.key, "fencingToken", lock.Fence())
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonAcquired, "Acquire",
		"Acquired lock %s with fencing token %d after waiting %s", lj.Spec.Lock.Name, lock.Fence(), waited.Round(time.Millisecond))
	lj.Status.AcquiredAt = &metav1.Time{Time: lock.GrantedAt()}
	return r.runJob(ctx, s, lock)
}

// wait records a LockedJob that did not get its lock: who blocks it and where it stands in line.
func (r *LockedJobReconciler) wait(s *scope, notObtained error, waited time.Duration) (ctrl.Result, error) {
	lj := s.lj
	// The acquire script answers with our place in line and the holder's name, so waiting costs one
	// round trip per pass.
	var blockedBy string
	var qe *redislock.QueuedError
	if errors.As(notObtained, &qe) {
		pos := int32(qe.Position)
		lj.Status.QueuePosition = &pos
		blockedBy = qe.Holder
	}
	r.redisUp(s)
	r.pending.mark(lj.UID, true)
	msg := fmt.Sprintf("Waiting for lock %s held by %s (position %d in queue)", lj.Spec.Lock.Name, blockedBy, derefInt32(lj.Status.QueuePosition))
	if blockedBy == "" {
		msg = fmt.Sprintf("Waiting for lock %s: waiters ahead in queue (position %d)", lj.Spec.Lock.Name, derefInt32(lj.Status.QueuePosition))
	}
	if lj.Status.Phase != batchv1alpha1.PhaseWaiting {
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonWaiting, "Wait", "%s", msg)
	}
	lj.Status.Phase = batchv1alpha1.PhaseWaiting
	lj.Status.BlockedBy = blockedBy
	lj.Status.Message = msg
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonWaiting, msg)

	next := r.waitBackoff(waited)
	if t := lj.Spec.Lock.AcquireTimeout; t != nil {
		next = min(next, max(t.Duration-waited, time.Millisecond))
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// waitBackoff grows with the time waited, so long waits cost little, and is jittered so waiters
// woken together do not ask Redis in lockstep.
func (r *LockedJobReconciler) waitBackoff(waited time.Duration) time.Duration {
	d := min(max(waited/4, r.Config.WaitBackoffMin), r.Config.WaitBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// giveUp fails a LockedJob that waited longer than spec.lock.acquireTimeout.
func (r *LockedJobReconciler) giveUp(ctx context.Context, s *scope, timeout time.Duration) error {
	lj := s.lj
	if err := r.Locks.Redis().Dequeue(ctx, s.key, r.Config.Identity.Holder(lj)); err != nil {
		return r.redisDown(s, err)
	}
	r.pending.mark(lj.UID, false)
	msg := fmt.Sprintf("Lock %s not obtained within spec.lock.acquireTimeout (%s)", lj.Spec.Lock.Name, timeout)
	lj.Status.Phase = batchv1alpha1.PhaseFailed
	lj.Status.Message = msg
	lj.Status.QueuePosition, lj.Status.BlockedBy = nil, ""
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonLockTimeout, msg)
	setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonLockTimeout, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockTimeout, "Acquire", "%s", msg)
	return nil
}

// readopt picks up a lock this LockedJob held before the operator restarted. The token is derived,
// so the same Obtain both re-adopts a lock that is still ours and tells us when it is not.
func (r *LockedJobReconciler) readopt(ctx context.Context, s *scope) (ctrl.Result, error) {
	lj := s.lj
	id := r.Config.Identity
	lock, err := r.Locks.Redis().Obtain(ctx, s.key, ttlOf(lj), redislock.WithToken(id.Token(lj)), redislock.WithMetadata(id.Holder(lj)))
	if errors.Is(err, redislock.ErrNotObtained) {
		return r.handleLockLost(ctx, s, fmt.Errorf("lock taken by another holder while the operator was away: %w", redislock.ErrLockLost))
	}
	if err != nil {
		return ctrl.Result{}, r.redisDown(s, fmt.Errorf("re-adopt %s: %w", s.key, err))
	}
	r.redisUp(s)
	if lock.Fence() != *lj.Status.FencingToken {
		// The lease ran out while nobody renewed it and this Obtain took it afresh: someone may have
		// held it in between, so the running Job was not protected. Give the fresh lock back.
		if err := lock.Release(ctx); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
			return ctrl.Result{}, r.redisDown(s, err)
		}
		return r.handleLockLost(ctx, s, fmt.Errorf("lease of fencing token %d expired while the operator was away: %w", *lj.Status.FencingToken, redislock.ErrLockLost))
	}
	if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, fmt.Errorf("renew %s: %w", s.key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", s.key, "fencingToken", lock.Fence())
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", lj.Spec.Lock.Name, lock.Fence())
	return r.runJob(ctx, s, lock)
}

// runJob makes sure the Job of this acquisition exists and records the running state.
func (r *LockedJobReconciler) runJob(ctx context.Context, s *scope, lock *redislock.Lock) (ctrl.Result, error) {
	lj := s.lj
	r.recordHeld(s, lock)
	if lj.Status.JobName == "" {
		lj.Status.JobName = jobName(lj, lock.Fence())
	}
	// Holder, fencing token and Job name reach the API server before the Job exists: an operator
	// that crashes after this write re-adopts the lock and creates the very same Job name, never a
	// second one. s.before is what the API server has, so this also covers an earlier pass whose
	// write failed after it took the lock.
	if stored := s.before.Status; stored.FencingToken == nil || *stored.FencingToken != lock.Fence() || stored.JobName != lj.Status.JobName {
		if err := r.patchStatusNow(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if s.job == nil {
		job, err := r.createJob(ctx, s, lock)
		if err != nil {
			return ctrl.Result{}, err
		}
		s.job = job
	}
	msg := fmt.Sprintf("Job %s runs under lock %s with fencing token %d", s.job.Name, lj.Spec.Lock.Name, lock.Fence())
	lj.Status.Phase = batchv1alpha1.PhaseRunning
	lj.Status.Message = msg
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionTrue, batchv1alpha1.ReasonJobRunning, msg)
	return ctrl.Result{RequeueAfter: r.Config.StatusInterval}, nil
}

// createJob creates the Job of this acquisition. Its name comes from the fencing token, so a second
// attempt (a retried reconcile, a restarted or paused operator) meets AlreadyExists and adopts the
// Job it finds instead of starting another.
func (r *LockedJobReconciler) createJob(ctx context.Context, s *scope, lock *redislock.Lock) (*batchv1.Job, error) {
	lj := s.lj
	job, err := buildJob(lj, lj.Status.JobName, lock.Fence(), r.Config.Identity.Holder(lj), r.Scheme)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Creating Job", "Job", klog.KObj(job), "fencingToken", lock.Fence())
	err = r.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		existing := &batchv1.Job{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(job), existing); err != nil {
			return nil, fmt.Errorf("get existing job %s: %w", job.Name, err)
		}
		if !metav1.IsControlledBy(existing, lj) {
			return nil, fmt.Errorf("job %s exists and does not belong to this LockedJob", job.Name)
		}
		return existing, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create job %s: %w", job.Name, err)
	}
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobCreated, "CreateJob", "Created Job %s with fencing token %d", job.Name, lock.Fence())
	return job, nil
}

// finish releases the lock of a Job that completed or failed.
func (r *LockedJobReconciler) finish(ctx context.Context, s *scope) (ctrl.Result, error) {
	lj := s.lj
	if err := r.release(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	ok, msg := jobOutcome(s.job)
	if ok {
		lj.Status.Phase = batchv1alpha1.PhaseSucceeded
		setCondition(lj, batchv1alpha1.ConditionComplete, metav1.ConditionTrue, batchv1alpha1.ReasonJobComplete, msg)
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete, "Finish", "%s", msg)
	} else {
		lj.Status.Phase = batchv1alpha1.PhaseFailed
		setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobFailed, msg)
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed, "Finish", "%s", msg)
	}
	lj.Status.Message = msg + "; lock released"
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, reasonOf(ok), msg)
	return ctrl.Result{}, nil
}

// release gives the lock back if this LockedJob holds it, or leaves the queue if it only waited. It
// works without a *Lock too (after a restart) because the token is derived; a lock that someone else
// holds by now is left alone.
func (r *LockedJobReconciler) release(ctx context.Context, s *scope) error {
	lj := s.lj
	lock := r.Locks.Forget(lj.UID)
	r.pending.mark(lj.UID, false)
	if lock == nil && !conditionTrue(lj, batchv1alpha1.ConditionLockAcquired) {
		return r.dequeue(ctx, s)
	}
	err := r.Locks.Redis().ReleaseToken(ctx, s.key, r.Config.Identity.Token(lj))
	if err != nil && !errors.Is(err, redislock.ErrNotHeld) {
		if lock != nil {
			_ = r.Locks.Track(lj, lock, renewIntervalOf(lj)) // keep renewing until we can release
		}
		return r.redisDown(s, fmt.Errorf("release %s: %w", s.key, err))
	}
	r.redisUp(s)
	ctrl.LoggerFrom(ctx).Info("Released lock", "lock", s.key)
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReleased, "Release", "Released lock %s (fencing token %d)", lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken))
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, "Lock released")
	lj.Status.ExpiresAt, lj.Status.BlockedBy, lj.Status.QueuePosition = nil, "", nil
	return nil
}

func (r *LockedJobReconciler) dequeue(ctx context.Context, s *scope) error {
	if err := r.Locks.Redis().Dequeue(ctx, s.key, r.Config.Identity.Holder(s.lj)); err != nil {
		return r.redisDown(s, fmt.Errorf("dequeue %s: %w", s.key, err))
	}
	return nil
}

// handleLockLost applies spec.lock.onLockLost to the Job of a LockedJob whose lock is gone.
func (r *LockedJobReconciler) handleLockLost(ctx context.Context, s *scope, cause error) (ctrl.Result, error) {
	lj := s.lj
	policy := lj.Spec.Lock.OnLockLost
	if policy == "" {
		policy = batchv1alpha1.LockLostSuspend
	}
	if s.job != nil && !jobFinished(s.job) {
		if err := r.stopJob(ctx, s.job, policy); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.Locks.Forget(lj.UID)
	msg := fmt.Sprintf("Lock %s lost while the Job ran (%v); policy %s applied", lj.Spec.Lock.Name, cause, policy)
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", s.key, "reason", cause.Error(), "policy", policy)
	lj.Status.Phase = batchv1alpha1.PhaseLockLost
	lj.Status.Message = msg
	lj.Status.ExpiresAt = nil
	setCondition(lj, batchv1alpha1.ConditionLockLost, metav1.ConditionTrue, batchv1alpha1.ReasonLockLost, msg)
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock", "%s", msg)
	return ctrl.Result{}, nil
}

// stopJob applies a lock-lost policy to a running Job.
func (r *LockedJobReconciler) stopJob(ctx context.Context, job *batchv1.Job, policy batchv1alpha1.LockLostPolicy) error {
	switch policy {
	case batchv1alpha1.LockLostSuspend:
		if job.Spec.Suspend != nil && *job.Spec.Suspend {
			return nil
		}
		base := job.DeepCopy()
		suspend := true
		job.Spec.Suspend = &suspend
		if err := r.Patch(ctx, job, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("suspend job %s: %w", job.Name, err)
		}
	case batchv1alpha1.LockLostDelete:
		if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete job %s: %w", job.Name, err)
		}
	}
	return nil
}

// reconcileDelete stops the Job, waits until its pods are gone, releases the lock and lets the
// LockedJob go. The lock is held until then, so a waiter never starts beside pods still running.
func (r *LockedJobReconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	lj := s.lj
	if !controllerutil.ContainsFinalizer(lj, finalizer) {
		return ctrl.Result{}, nil
	}
	if s.job != nil && !jobFinished(s.job) && s.job.DeletionTimestamp.IsZero() {
		ctrl.LoggerFrom(ctx).Info("Deleting Job before releasing the lock", "Job", klog.KObj(s.job))
		if err := r.stopJob(ctx, s.job, batchv1alpha1.LockLostDelete); err != nil {
			return ctrl.Result{}, err
		}
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobDeleted, "DeleteJob", "Deleted Job %s; the lock is released once its pods are gone", s.job.Name)
	}
	// The Job object goes first and its pods follow (background deletion), so pods are found by
	// the Job's name, which status keeps after the Job is gone.
	if lj.Status.JobName != "" {
		running, err := r.podsRunning(ctx, lj.Namespace, lj.Status.JobName)
		if err != nil {
			return ctrl.Result{}, err
		}
		if running > 0 {
			lj.Status.Message = fmt.Sprintf("Deleting: waiting for %d pod(s) of Job %s to stop before releasing lock %s", running, lj.Status.JobName, lj.Spec.Lock.Name)
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	if err := r.release(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	base := lj.DeepCopy()
	controllerutil.RemoveFinalizer(lj, finalizer)
	return ctrl.Result{}, r.Patch(ctx, lj, client.MergeFrom(base))
}

// podsRunning counts the pods of the named Job that have not finished (terminating ones count),
// read from the API server: a cluster-wide pod cache would cost more memory than this rare check
// is worth.
func (r *LockedJobReconciler) podsRunning(ctx context.Context, namespace, jobName string) (int, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(namespace),
		client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// observeJob reads the Job this LockedJob created, if any.
func (r *LockedJobReconciler) observeJob(ctx context.Context, s *scope) error {
	if s.lj.Status.JobName == "" {
		return nil
	}
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.lj.Namespace, Name: s.lj.Status.JobName}, job)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get job %s: %w", s.lj.Status.JobName, err)
	}
	if metav1.IsControlledBy(job, s.lj) {
		s.job = job
	}
	return nil
}

func (r *LockedJobReconciler) clusterScopeAllowed(ns string) bool {
	return slices.Contains(r.Config.ClusterScopeNamespaces, "*") || slices.Contains(r.Config.ClusterScopeNamespaces, ns)
}

func (r *LockedJobReconciler) markScopeNotAllowed(s *scope) {
	msg := fmt.Sprintf("spec.lock.scope Cluster is not allowed in namespace %s: the operator trusts only %v", s.lj.Namespace, r.Config.ClusterScopeNamespaces)
	s.lj.Status.Phase = batchv1alpha1.PhasePending
	s.lj.Status.Message = msg
	setCondition(s.lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonScopeNotAllowed, msg)
}

// redisDown records a Redis failure and returns err for the runtime's backoff.
func (r *LockedJobReconciler) redisDown(s *scope, err error) error {
	msg := fmt.Sprintf("Redis unavailable: %v", err)
	if !conditionFalse(s.lj, batchv1alpha1.ConditionRedisAvailable) {
		r.event(s.lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Redis", "%s", msg)
	}
	setCondition(s.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, msg)
	return err
}

func (r *LockedJobReconciler) redisUp(s *scope) {
	setCondition(s.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionTrue, batchv1alpha1.ReasonRedisOK, "Redis answered")
}

// recordHeld writes the holder's view of the lock into status; renewal times at most once per
// StatusInterval, so many held locks do not flood the API server.
func (r *LockedJobReconciler) recordHeld(s *scope, lock *redislock.Lock) {
	lj := s.lj
	fence := lock.Fence()
	lj.Status.FencingToken = &fence
	lj.Status.Holder = r.Config.Identity.Holder(lj)
	lj.Status.BlockedBy, lj.Status.QueuePosition = "", nil
	granted := lock.GrantedAt()
	if lj.Status.RenewedAt == nil || granted.Sub(lj.Status.RenewedAt.Time) >= r.Config.StatusInterval || lj.Status.ExpiresAt == nil {
		lj.Status.RenewedAt = &metav1.Time{Time: granted}
		lj.Status.ExpiresAt = &metav1.Time{Time: lock.ValidUntil()}
	}
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionTrue, batchv1alpha1.ReasonAcquired,
		fmt.Sprintf("Holding lock %s with fencing token %d", lj.Spec.Lock.Name, fence))
}

func (r *LockedJobReconciler) event(lj *batchv1alpha1.LockedJob, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(lj, nil, eventType, reason, action, note, args...)
	}
}

// patchStatusNow writes status immediately (before creating the Job) and moves the patch base, so
// the deferred patch carries only what changes after it.
func (r *LockedJobReconciler) patchStatusNow(ctx context.Context, s *scope) error {
	s.lj.Status.ObservedGeneration = s.lj.Generation
	setReady(s.lj)
	if err := r.Status().Patch(ctx, s.lj, client.MergeFrom(s.before)); err != nil {
		return fmt.Errorf("record lock in status: %w", err)
	}
	s.before = s.lj.DeepCopy()
	return nil
}

// patchStatus is the one status write at the end of a pass. observedGeneration moves only when the
// pass succeeded; nothing is written when nothing changed.
func (r *LockedJobReconciler) patchStatus(ctx context.Context, s *scope, reterr error) error {
	if reterr == nil {
		s.lj.Status.ObservedGeneration = s.lj.Generation
	}
	setReady(s.lj)
	if equality.Semantic.DeepEqual(s.before.Status, s.lj.Status) {
		return nil
	}
	err := r.Status().Patch(ctx, s.lj, client.MergeFrom(s.before))
	return client.IgnoreNotFound(err)
}

// SetupWithManager wires the reconciler: LockedJobs, the Jobs they own, lost-lock events from the
// keeper and release wake-ups from Redis.
func (r *LockedJobReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.Config.defaults()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.Locks.OnRenewFailed = func(lj *batchv1alpha1.LockedJob, err error) {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRenewFailed, "Renew",
			"Renewing the lock failed (%v); retrying until the lease runs out", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &batchv1alpha1.LockedJob{}, indexLockKey, func(o client.Object) []string {
		return []string{o.(*batchv1alpha1.LockedJob).Status.LockKey}
	}); err != nil {
		return fmt.Errorf("index %s: %w", indexLockKey, err)
	}
	waker := &releaseWaker{redis: r.Locks.Redis(), reader: mgr.GetClient(), events: make(chan event.GenericEvent, 256)}
	if err := mgr.Add(waker); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.LockedJob{}).
		Owns(&batchv1.Job{}).
		WatchesRawSource(source.Channel(r.Locks.Events(), &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(waker.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Config.MaxConcurrentReconciles, 1)}).
		Named("lockedjob").
		Complete(r)
}

func ttlOf(lj *batchv1alpha1.LockedJob) time.Duration {
	if lj.Spec.Lock.TTL != nil {
		return lj.Spec.Lock.TTL.Duration
	}
	return defaultTTL
}

func renewIntervalOf(lj *batchv1alpha1.LockedJob) time.Duration {
	if lj.Spec.Lock.RenewInterval != nil {
		return lj.Spec.Lock.RenewInterval.Duration
	}
	return 0 // the keeper's default: a third of the lease
}

func isTerminal(p batchv1alpha1.LockedJobPhase) bool {
	return p == batchv1alpha1.PhaseSucceeded || p == batchv1alpha1.PhaseFailed || p == batchv1alpha1.PhaseLockLost
}

func derefInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func derefInt64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func reasonOf(ok bool) string {
	if ok {
		return batchv1alpha1.ReasonJobComplete
	}
	return batchv1alpha1.ReasonJobFailed
}
