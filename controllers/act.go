package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The steps of the state machine (see decide). Each acts on Redis or the API server and records
// what happened in p.lj.Status; Reconcile writes that status once, at the end of the pass.

// redisCtx bounds one Redis call of a pass.
func (r *LockedJobReconciler) redisCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.Config.RedisTimeout)
}

// ---------------------------------------------------------------- acquiring

// acquire validates the Job, then acquires the lock or records why the LockedJob waits.
func (r *LockedJobReconciler) acquire(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj, now := p.lj, r.Clock.Now()
	first := lj.Status.WaitingSince == nil
	if first {
		lj.Status.WaitingSince = &metav1.Time{Time: now}
		lj.Status.Phase = batchv1alpha1.PhasePending
		// The Job API refuses some templates only at create; finding out after acquiring the lock
		// would hold it for nothing. The template is immutable, so once is enough.
		if err := r.validateJob(ctx, lj); err != nil {
			if isRefusal(err) {
				r.failJobInvalid(p, err)
				return ctrl.Result{}, false, nil
			}
			return ctrl.Result{}, false, err
		}
		r.warnShortTTL(lj)
	}
	lj.Status.LockKey = r.Locks.Redis().RedisKey(p.key)
	waited := now.Sub(lj.Status.WaitingSince.Time)
	if t := lj.Spec.Lock.AcquireTimeout; t != nil && waited >= t.Duration {
		return ctrl.Result{}, false, r.giveUp(ctx, p, t.Duration)
	}

	// A waiter asks Redis only when something may have changed (see waiting.go).
	if !first {
		switch what, hint, left, priority := r.waiting.next(r.Config.Identity.Holder(lj), now); what {
		case askHint:
			return r.wait(p, &redislock.QueuedError{Position: hint.position, Holder: hint.holder}, waited), false, nil
		case askNothing:
			return ctrl.Result{RequeueAfter: left, Priority: &priority}, false, nil
		}
	}

	if holder, busy, err := r.legacyHolder(ctx, p); err != nil {
		return ctrl.Result{}, false, r.redisDown(p, err)
	} else if busy {
		return r.wait(p, &redislock.QueuedError{Position: 1, Holder: holder}, waited), false, nil
	}

	id := r.Config.Identity
	rctx, cancel := r.redisCtx(ctx)
	lock, err := r.Locks.Redis().Acquire(rctx, p.key, ttlOf(lj),
		redislock.WithToken(id.Token(lj)),
		redislock.WithMetadata(id.Holder(lj)),
		redislock.WithQueue(id.Holder(lj), id.QueueScore(lj), r.Config.waiterLiveness()))
	cancel()
	if errors.Is(err, redislock.ErrNotAcquired) {
		return r.wait(p, err, waited), false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("acquire %s: %w", p.key, err))
	}

	r.redisUp(p)
	r.waiting.done(r.Config.Identity.Holder(lj))
	locksAcquiredTotal.Inc()
	lockWaitSeconds.Observe(waited.Seconds())
	r.recordHeld(p, lock)
	if lj.Status.JobName == "" {
		lj.Status.JobName = jobName(lj, lock.Fence())
	}
	if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.key, err)
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", p.key, "fencingToken", lock.Fence())
	p.acquired = fmt.Sprintf("Acquired lock %s with fencing token %d after waiting %s", lj.Spec.Lock.Name, lock.Fence(), waited.Round(time.Millisecond))
	lj.Status.AcquiredAt = &metav1.Time{Time: lock.LeaseStart()}
	return ctrl.Result{}, true, nil
}

// legacyHolder reports whether the lock is held under the key layout of an earlier version (see
// docs/design.md, "Migration"), whose holder then blocks this acquisition as any holder would. A
// legacy key held with this LockedJob's own token was handed to it as a queued waiter: it is given
// back instead of waited for. Costs one Redis call while Config.LegacyLockKeys is on.
func (r *LockedJobReconciler) legacyHolder(ctx context.Context, p *pass) (holder string, busy bool, err error) {
	legacy, ok := r.Config.Identity.LegacyLockKey(p.lj)
	if !r.Config.LegacyLockKeys || !ok || legacy == p.key {
		return "", false, nil
	}
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	st, err := r.Locks.Redis().Inspect(rctx, legacy)
	if err != nil || !st.Held {
		return "", false, err
	}
	err = r.Locks.Redis().ReleaseToken(rctx, legacy, r.Config.Identity.Token(p.lj))
	switch {
	case err == nil:
		return "", false, nil
	case errors.Is(err, redislock.ErrNotHeld):
		return st.Metadata, true, nil
	default:
		return "", false, err
	}
}

// validateJob asks the API server to create the Job as a dry run, so admission and validation speak
// before the lock is acquired. The name is one no acquisition gets (fence 0).
func (r *LockedJobReconciler) validateJob(ctx context.Context, lj *batchv1alpha1.LockedJob) error {
	job, err := buildJob(lj, jobName(lj, 0), 0, r.Config.Identity.Holder(lj), r.Scheme)
	if err != nil {
		return err
	}
	err = r.Create(ctx, job, client.DryRunAll)
	if apierrors.IsAlreadyExists(err) {
		return nil // validation passed; only the name is taken
	}
	if err != nil {
		return fmt.Errorf("validate job: %w", err)
	}
	return nil
}

// isRefusal tells an answer that no retry changes (the Job itself is invalid or not allowed) from a
// transient failure.
func isRefusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// failJobInvalid ends a LockedJob whose Job the API server refuses.
func (r *LockedJobReconciler) failJobInvalid(p *pass, cause error) {
	lj := p.lj
	msg := fmt.Sprintf("The Job of spec.jobTemplate was refused by the API server: %v", cause)
	lj.Status.Phase = batchv1alpha1.PhaseFailed
	lj.Status.Message = msg
	lj.Status.QueuePosition, lj.Status.BlockedBy = nil, ""
	setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobInvalid, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobInvalid, "ValidateJob", "%s", msg)
}

// warnShortTTL says once when the lease cannot outlive a leader change: a successor operator
// re-adopts only after the old leader's lease ends, by which time this lock has expired.
func (r *LockedJobReconciler) warnShortTTL(lj *batchv1alpha1.LockedJob) {
	if r.Config.FailoverTime <= 0 || ttlOf(lj) > r.Config.FailoverTime {
		return
	}
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonTTLBelowFailover, "Acquire",
		"spec.lock.ttl %s is not longer than the operator's failover time %s: if the operator's leader changes while the Job runs, the lock expires before a successor can renew it and the Job's lock is lost",
		ttlOf(lj), r.Config.FailoverTime)
}

// wait records a LockedJob that did not get its lock: who blocks it and where it stands in line.
func (r *LockedJobReconciler) wait(p *pass, notAcquired error, waited time.Duration) ctrl.Result {
	lj := p.lj
	// The acquire script answers with our place in line and the holder's name, so waiting costs one
	// round trip per pass.
	var blockedBy string
	place := "in queue"
	var qe *redislock.QueuedError
	if errors.As(notAcquired, &qe) {
		blockedBy = qe.Holder
		shown, exact := shownPosition(qe.Position)
		if exact {
			pos := int32(shown)
			lj.Status.QueuePosition = &pos
			place = fmt.Sprintf("position %d in queue", shown)
		} else {
			// Far back, the holder changes with every handoff ahead: naming it would rewrite every
			// deep waiter's status each time.
			lj.Status.QueuePosition, blockedBy = nil, ""
			place = fmt.Sprintf("position >%d in queue", shown)
		}
	}
	r.redisUp(p)
	msg := fmt.Sprintf("Waiting for lock %s held by %s (%s)", lj.Spec.Lock.Name, blockedBy, place)
	if blockedBy == "" {
		msg = fmt.Sprintf("Waiting for lock %s: waiters ahead (%s)", lj.Spec.Lock.Name, place)
	}
	if lj.Status.Phase != batchv1alpha1.PhaseWaiting {
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonWaiting, "Wait", "%s", msg)
	}
	lj.Status.Phase = batchv1alpha1.PhaseWaiting
	lj.Status.BlockedBy = blockedBy
	lj.Status.Message = msg
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonWaiting, msg)

	// The head re-checks soon and at the usual priority: nobody announces a lock freed by an expiry,
	// or a handoff whose announcement found it not yet waiting in the cache.
	next, priority := r.waitBackoff(waited), 0
	if qe != nil && qe.Position > 1 && r.Locks.Redis().HandsOff() {
		// Behind the head: handoffs tell this waiter its place and the queue keeper keeps it queued,
		// so a re-check is a safety net, and under a burst it yields to the passes events ask for.
		next, priority = jitter(r.Config.QueueRecheck), handler.LowPriority
	}
	if t := lj.Spec.Lock.AcquireTimeout; t != nil {
		next = min(next, max(t.Duration-waited, time.Millisecond))
	}
	r.waiting.waiting(r.Config.Identity.Holder(lj), client.ObjectKeyFromObject(lj), p.key, r.Clock.Now().Add(next), priority)
	return ctrl.Result{RequeueAfter: next, Priority: &priority}
}

// exactPositions is how far back a waiter's queue position is shown exactly: the few that tell the
// user what comes next. Every handoff rewrites each of them, so this is also the status writes a
// handoff costs (plus one for a bucket bound).
const exactPositions = 3

// shownPosition is a queue position as status shows it: exact near the head; further back only
// the bucket it is in (more than 3, 5, 10, 20, 50, 100, 200, 500, ...), so a waiter deep in a long
// queue rewrites its status O(log depth) times over its wait instead of once per holder ahead of
// it. exact is false for a bucket's lower bound.
func shownPosition(position int) (shown int, exact bool) {
	if position <= exactPositions {
		return position, true
	}
	bound := exactPositions
	for {
		next := nextBound(bound)
		if position <= next {
			return bound, false
		}
		bound = next
	}
}

// nextBound is the bucket bound after bound: 3, 5, then the 1-2-5 series 10, 20, 50, 100, ...
func nextBound(bound int) int {
	switch {
	case bound < 5:
		return 5
	case bound < 10:
		return 10
	}
	magnitude := 1
	for bound/magnitude >= 10 {
		magnitude *= 10
	}
	switch bound / magnitude {
	case 1:
		return 2 * magnitude
	case 2:
		return 5 * magnitude
	default:
		return 10 * magnitude
	}
}

// waitBackoff grows with the time waited, so long waits cost little, and is jittered so waiters
// woken together do not ask Redis in lockstep.
func (r *LockedJobReconciler) waitBackoff(waited time.Duration) time.Duration {
	return jitter(min(max(waited/4, r.Config.WaitBackoffMin), r.Config.WaitBackoffMax))
}

// giveUp fails a LockedJob that waited longer than spec.lock.acquireTimeout.
func (r *LockedJobReconciler) giveUp(ctx context.Context, p *pass, timeout time.Duration) error {
	lj := p.lj
	if err := r.dequeue(ctx, p); err != nil {
		return err
	}
	r.waiting.done(r.Config.Identity.Holder(lj))
	msg := fmt.Sprintf("Lock %s not acquired within spec.lock.acquireTimeout (%s)", lj.Spec.Lock.Name, timeout)
	lj.Status.Phase = batchv1alpha1.PhaseFailed
	lj.Status.Message = msg
	lj.Status.QueuePosition, lj.Status.BlockedBy = nil, ""
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonLockTimeout, msg)
	setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonLockTimeout, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockTimeout, "Acquire", "%s", msg)
	return nil
}

// acquireOwn acquires or re-adopts the lock with this LockedJob's own token (no queue).
func (r *LockedJobReconciler) acquireOwn(ctx context.Context, p *pass) (*redislock.Lock, error) {
	id := r.Config.Identity
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	return r.Locks.Redis().Acquire(rctx, p.key, ttlOf(p.lj), redislock.WithToken(id.Token(p.lj)), redislock.WithMetadata(id.Holder(p.lj)))
}

// readopt picks up a lock this LockedJob held before the operator restarted (or its leader
// changed). The token is derived, so the same Acquire both re-adopts a lock that is still ours and
// tells us when it is not.
func (r *LockedJobReconciler) readopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj := p.lj
	lock, err := r.acquireOwn(ctx, p)
	if errors.Is(err, redislock.ErrNotAcquired) {
		r.lostWhileAway(p)
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("re-adopt %s: %w", p.key, err))
	}
	r.redisUp(p)
	if !readopted(lock, lj) {
		// The lease ran out while nobody renewed it and this Acquire took it afresh: someone may have
		// held it in between, so the running Job was not protected. Keep the fresh lock until the
		// Job is stopped and its pods are gone; it is released after that.
		cause := fmt.Errorf("lease of fencing token %d expired while the operator was away: %w", derefInt64(lj.Status.FencingToken), redislock.ErrLockLost)
		if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
			return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.key, err)
		}
		r.Locks.MarkAtRisk(lj.UID, cause)
		p.obs.holding, p.obs.lost = lock, cause
		return ctrl.Result{}, true, nil
	}
	if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.key, err)
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Re-adopted lock", "lock", p.key, "fencingToken", lock.Fence())
	r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReadopted, "Readopt", "Re-adopted lock %s with fencing token %d", lj.Spec.Lock.Name, lock.Fence())
	return ctrl.Result{}, true, nil
}

// lostWhileAway records that a lock this LockedJob held is now held by someone else, in the book
// and in p.obs.lost.
func (r *LockedJobReconciler) lostWhileAway(p *pass) {
	cause := fmt.Errorf("lock held by another holder while the operator was away: %w", redislock.ErrLockLost)
	r.Locks.MarkLost(p.lj, cause)
	p.obs.lost = cause
}

// readopted reports whether lock continues the acquisition that status records: found held with
// our token (not granted afresh) under the recorded fencing token.
func readopted(lock *redislock.Lock, lj *batchv1alpha1.LockedJob) bool {
	return lock.Readopted() && lj.Status.FencingToken != nil && lock.Fence() == *lj.Status.FencingToken
}

// ---------------------------------------------------------------- running

// createJob records holder and fencing token, then creates the Job of this acquisition.
func (r *LockedJobReconciler) createJob(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj, lock := p.lj, p.obs.holding
	r.recordHeld(p, lock)
	if lj.Status.JobName == "" {
		lj.Status.JobName = jobName(lj, lock.Fence())
	}
	r.Locks.BindJob(lj)
	// Holder, fencing token and Job name reach the API server before the Job exists, under optimistic
	// locking: an operator that crashes after this write re-adopts the lock and creates the very same
	// Job name, never a second one, and a pass that read a stale object creates nothing.
	if stored := p.before.Status; stored.FencingToken == nil || *stored.FencingToken != lock.Fence() || stored.JobName != lj.Status.JobName {
		if err := r.recordNow(ctx, p); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	job, err := buildJob(lj, lj.Status.JobName, lock.Fence(), r.Config.Identity.Holder(lj), r.Scheme)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	ctrl.LoggerFrom(ctx).Info("Creating Job", "Job", klog.KObj(job), "fencingToken", lock.Fence())
	err = r.Create(ctx, job)
	switch {
	case apierrors.IsAlreadyExists(err):
		// A retried pass, or a paused operator: the Job of this acquisition exists. observe adopts it.
		existing, err := r.findJob(ctx, lj, job.Name)
		if err != nil {
			return ctrl.Result{}, false, err
		}
		if existing == nil {
			return ctrl.Result{}, false, fmt.Errorf("job %s exists but cannot be read", job.Name)
		}
		job = existing
	case isRefusal(err):
		r.failJobInvalid(p, err)
		if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{}, false, nil
	case err != nil:
		return ctrl.Result{}, false, fmt.Errorf("create job %s: %w", job.Name, err)
	default:
		msg := fmt.Sprintf("Created Job %s with fencing token %d", job.Name, lock.Fence())
		if p.acquired != "" {
			msg = fmt.Sprintf("%s; created Job %s", p.acquired, job.Name)
		}
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobCreated, "CreateJob", "%s", msg)
	}
	lj.Status.JobUID = job.UID
	p.obs.job, p.obs.jobCreated = job, true
	return ctrl.Result{}, true, nil
}

// recordRunning records a Job that runs under its lock.
func (r *LockedJobReconciler) recordRunning(p *pass) {
	lj := p.lj
	r.recordHeld(p, p.obs.holding)
	msg := fmt.Sprintf("Job %s runs under lock %s with fencing token %d", lj.Status.JobName, lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken))
	reason := batchv1alpha1.ReasonJobRunning
	if p.obs.stuck != "" {
		msg = fmt.Sprintf("Job %s holds lock %s (fencing token %d) but its pod cannot start: %s",
			lj.Status.JobName, lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken), p.obs.stuck)
		reason = batchv1alpha1.ReasonPodStuck
	}
	lj.Status.Phase = batchv1alpha1.PhaseRunning
	lj.Status.Message = msg
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionTrue, reason, msg)
}

// recordHeld writes the holder's view of the lock into status: what changes only with a new grant,
// so a pass over a held lock that merely renews writes nothing.
func (r *LockedJobReconciler) recordHeld(p *pass, lock *redislock.Lock) {
	lj := p.lj
	fence := lock.Fence()
	lj.Status.FencingToken = &fence
	lj.Status.Holder = r.Config.Identity.Holder(lj)
	lj.Status.LockKey = lock.RedisKey()
	lj.Status.BlockedBy, lj.Status.QueuePosition = "", nil
	// Renewal times are not status: Redis has them, and writing them would cost the API server a
	// write per held lock per interval for nothing a user acts on. Objects of earlier versions lose
	// theirs with the next state change.
	lj.Status.RenewedAt, lj.Status.ExpiresAt = nil, nil
	if lj.Status.Phase == "" || lj.Status.Phase == batchv1alpha1.PhaseWaiting {
		lj.Status.Phase = batchv1alpha1.PhasePending
	}
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionTrue, batchv1alpha1.ReasonAcquired,
		fmt.Sprintf("Holding lock %s with fencing token %d", lj.Spec.Lock.Name, fence))
}

// ---------------------------------------------------------------- ending

// finish releases the lock of a Job that completed or failed. A release that finds the lock not
// ours means it was lost during the run (a paused operator, a Redis that lost data): LockLost, never
// Succeeded.
func (r *LockedJobReconciler) finish(ctx context.Context, p *pass) error {
	lj := p.lj
	if !p.obs.released {
		err := r.release(ctx, p)
		if errors.Is(err, redislock.ErrNotHeld) {
			cause := fmt.Errorf("the lock was not ours when the Job ended; another holder may have run during the Job: %w", redislock.ErrLockLost)
			r.Locks.MarkLost(lj, cause)
			return r.loseLock(ctx, p, cause)
		}
		if err != nil {
			return err
		}
	}
	lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	ok, msg := true, "The Job ended"
	if p.obs.job != nil {
		ok, msg = jobOutcome(p.obs.job)
	}
	// One Event tells the end and the release, which always come together.
	told := fmt.Sprintf("%s; released lock %s (fencing token %d)", msg, lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken))
	if ok {
		lj.Status.Phase = batchv1alpha1.PhaseSucceeded
		setCondition(lj, batchv1alpha1.ConditionComplete, metav1.ConditionTrue, batchv1alpha1.ReasonJobComplete, msg)
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobComplete, "Finish", "%s", told)
	} else {
		lj.Status.Phase = batchv1alpha1.PhaseFailed
		setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobFailed, msg)
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobFailed, "Finish", "%s", told)
	}
	lj.Status.Message = msg + "; lock released"
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, reasonOf(ok), msg)
	return nil
}

// releaseAndTell releases (see release) and says so in a Released Event.
func (r *LockedJobReconciler) releaseAndTell(ctx context.Context, p *pass) error {
	if err := r.release(ctx, p); err != nil {
		return err
	}
	r.event(p.lj, corev1.EventTypeNormal, batchv1alpha1.ReasonReleased, "Release", "Released lock %s (fencing token %d)",
		p.lj.Spec.Lock.Name, derefInt64(p.lj.Status.FencingToken))
	return nil
}

// release gives the lock back by compare-and-delete with this LockedJob's token (which works
// without a *Lock, after a restart) and records it. It returns ErrNotHeld when the lock was not ours;
// a lock someone else holds is left alone. The caller tells it: finish in its own Event.
func (r *LockedJobReconciler) release(ctx context.Context, p *pass) error {
	lj := p.lj
	lock := r.Locks.Untrack(lj.UID)
	r.waiting.done(r.Config.Identity.Holder(lj))
	rctx, cancel := r.redisCtx(ctx)
	err := r.Locks.Redis().ReleaseToken(rctx, p.key, r.Config.Identity.Token(lj))
	cancel()
	if errors.Is(err, redislock.ErrNotHeld) {
		r.redisUp(p)
		return err
	}
	if err != nil {
		if lock != nil {
			_ = r.Locks.Track(lj, lock, renewIntervalOf(lj)) // keep renewing until we can release
		}
		return r.redisDown(p, fmt.Errorf("release %s: %w", p.key, err))
	}
	r.redisUp(p)
	r.Locks.MarkReleased(lj)
	p.obs.released, p.obs.holding = true, nil
	ctrl.LoggerFrom(ctx).Info("Released lock", "lock", p.key)
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, "Lock released")
	lj.Status.BlockedBy, lj.Status.QueuePosition = "", nil
	return nil
}

func (r *LockedJobReconciler) dequeue(ctx context.Context, p *pass) error {
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	if err := r.Locks.Redis().Dequeue(rctx, p.key, r.Config.Identity.Holder(p.lj)); err != nil {
		return r.redisDown(p, fmt.Errorf("dequeue %s: %w", p.key, err))
	}
	return nil
}

// releaseAfterEnd releases a lock still held by a finished LockedJob (a release that failed, or a
// lock whose lease was at risk and whose Job was stopped) once the Job's pods are gone.
func (r *LockedJobReconciler) releaseAfterEnd(ctx context.Context, p *pass) (ctrl.Result, error) {
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	err := r.releaseAndTell(ctx, p)
	switch {
	case errors.Is(err, redislock.ErrNotHeld):
		// Expired or held by another meanwhile: nothing is ours to release, and status must stop saying so.
		setCondition(p.lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, "Lock no longer held")
	case err != nil:
		return ctrl.Result{}, err
	}
	r.Locks.Forget(p.lj.UID)
	return ctrl.Result{}, nil
}

// loseLock applies spec.lock.onLockLost to the Job of a LockedJob whose lock is gone or at risk.
// The LockedJob goes terminal only once its Job is stopped (or the policy is Ignore): a Job that may
// still run unstopped is never left behind a terminal status.
func (r *LockedJobReconciler) loseLock(ctx context.Context, p *pass, cause error) error {
	lj := p.lj
	policy := lossPolicy(lj)
	if job := p.obs.job; job != nil && !jobFinished(job) {
		if err := r.stopJob(ctx, job, policy); err != nil {
			return err
		}
	}
	r.waiting.done(r.Config.Identity.Holder(lj))
	msg := fmt.Sprintf("Lock %s lost while the Job ran (%v); policy %s applied", lj.Spec.Lock.Name, cause, policy)
	ctrl.LoggerFrom(ctx).Info("Lock lost", "lock", p.key, "reason", cause.Error(), "policy", policy)
	lj.Status.Phase = batchv1alpha1.PhaseLockLost
	lj.Status.Message = msg
	setCondition(lj, batchv1alpha1.ConditionLockLost, metav1.ConditionTrue, batchv1alpha1.ReasonLockLost, msg)
	setCondition(lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "LoseLock", "%s", msg)
	return nil
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

// stopWorkload is the lock book's way to stop the Job of a lost lock at once, without waiting for a
// reconcile worker. The reconciler that runs afterwards finds the Job stopped and records LockLost.
func (r *LockedJobReconciler) stopWorkload(ctx context.Context, w Workload, cause error) {
	lj := &batchv1alpha1.LockedJob{}
	lj.Namespace, lj.Name, lj.UID = w.LockedJob.Namespace, w.LockedJob.Name, w.UID
	job, err := r.findJob(ctx, lj, w.Job)
	if err == nil && job != nil && !jobFinished(job) {
		err = r.stopJob(ctx, job, w.Policy)
	}
	if err != nil {
		ctrl.Log.WithName("lockbook").Error(err, "Stopping the Job of a lost lock failed; the reconciler retries",
			"LockedJob", klog.KRef(lj.Namespace, lj.Name), "cause", cause.Error())
	}
}

// jobGone ends a LockedJob whose Job was deleted out of band (kubectl delete job, a TTL controller,
// garbage collection). The Job is never created again: that would run the workload twice under one
// fencing token. The lock is held until the Job's pods are gone.
func (r *LockedJobReconciler) jobGone(ctx context.Context, p *pass) (ctrl.Result, error) {
	lj := p.lj
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
		return ctrl.Result{}, err
	}
	msg := fmt.Sprintf("Job %s was deleted before it finished; it is not created again", lj.Status.JobName)
	lj.Status.Phase = batchv1alpha1.PhaseFailed
	lj.Status.Message = msg + "; lock released"
	lj.Status.ReleasedAt = &metav1.Time{Time: r.Clock.Now()}
	setCondition(lj, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobDeleted, msg)
	setCondition(lj, batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, batchv1alpha1.ReasonJobDeleted, msg)
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobDeleted, "JobGone", "%s", msg)
	return ctrl.Result{}, nil
}

// ---------------------------------------------------------------- deletion

// deleteReadopt re-adopts the lock of a LockedJob being deleted after an operator restart, so the
// lock keeps covering the Job's pods until they are gone.
func (r *LockedJobReconciler) deleteReadopt(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj := p.lj
	lock, err := r.acquireOwn(ctx, p)
	if errors.Is(err, redislock.ErrNotAcquired) {
		r.lostWhileAway(p)
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "Readopt",
			"Could not re-adopt lock %s while deleting (%v): the Job's pods may overlap the next holder", lj.Spec.Lock.Name, p.obs.lost)
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Readopt",
			"Could not re-adopt lock %s while deleting: %v", lj.Spec.Lock.Name, err)
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("re-adopt %s: %w", p.key, err))
	}
	if err := r.Locks.Track(lj, lock, renewIntervalOf(lj)); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("renew %s: %w", p.key, err)
	}
	p.obs.holding = lock
	if !readopted(lock, lj) {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockLost, "Readopt",
			"The lease of lock %s had expired while the operator was away; holding it again until the Job's pods are gone", lj.Spec.Lock.Name)
	}
	return ctrl.Result{}, true, nil
}

// deleteJob deletes the running Job of a LockedJob being deleted; its pods go after it.
func (r *LockedJobReconciler) deleteJob(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	job := p.obs.job
	ctrl.LoggerFrom(ctx).Info("Deleting Job before releasing the lock", "Job", klog.KObj(job))
	if err := r.stopJob(ctx, job, batchv1alpha1.LockLostDelete); err != nil {
		return ctrl.Result{}, false, err
	}
	r.event(p.lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobDeleted, "DeleteJob", "Deleted Job %s; the lock is released once its pods are gone", job.Name)
	p.obs.job = nil
	return ctrl.Result{}, true, nil
}

// deleteRelease waits until the Job's pods are gone, then releases the lock and leaves the queue
// (both whenever the LockedJob had not finished: a crash between acquiring and recording leaves a
// lock that only the token names), and lets the LockedJob go.
func (r *LockedJobReconciler) deleteRelease(ctx context.Context, p *pass) (ctrl.Result, error) {
	if wait, err := r.waitForPods(ctx, p); err != nil || wait {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	if mayHoldOrWait(p.obs) {
		if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
			return ctrl.Result{}, err
		}
		if err := r.dequeue(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.removeFinalizer(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	r.Locks.Forget(p.lj.UID)
	return ctrl.Result{}, nil
}

// mayHoldOrWait reports whether the LockedJob may still hold its lock or stand in its queue. Every
// way to a terminal phase releases or gives up the lock and leaves the queue, unless a release
// failed, which status still shows as held; so a finished LockedJob needs no Redis call to go.
func mayHoldOrWait(o observation) bool {
	return !o.terminal || o.holding != nil || o.lockRecorded
}

// waitForPods reports whether pods of the LockedJob's Job still exist, and records that in the
// message. A finished Job has no running pods (its terminal condition comes after they stopped);
// otherwise every pod object counts until it is gone, terminating or not. Only pod metadata is read.
func (r *LockedJobReconciler) waitForPods(ctx context.Context, p *pass) (bool, error) {
	lj := p.lj
	if lj.Status.JobName == "" || (p.obs.job != nil && jobFinished(p.obs.job)) {
		return false, nil
	}
	n, err := r.podsOf(ctx, lj.Namespace, lj.Status.JobName)
	if err != nil || n == 0 {
		return false, err
	}
	lj.Status.Message = fmt.Sprintf("Waiting for %d pod(s) of Job %s to be gone before releasing lock %s", n, lj.Status.JobName, lj.Spec.Lock.Name)
	return true, nil
}

// podsOf counts the pods of the named Job, from the API server, reading metadata only: the operator
// never needs pod specs (and their environment values).
func (r *LockedJobReconciler) podsOf(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// stuckPod says, in the kubelet's words, why a pod of the Job cannot start, or "" when none is
// stuck. A failed look is not worth failing the pass for: it only feeds the status message.
func (r *LockedJobReconciler) stuckPod(ctx context.Context, job *batchv1.Job) string {
	pods := &corev1.PodList{}
	err := r.APIReader.List(ctx, pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.JobNameLabel: job.Name}, client.Limit(8))
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("listing pods for a stuck container failed", "Job", klog.KObj(job), "error", err.Error())
		return ""
	}
	for _, pod := range pods.Items {
		for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Sprintf("pod %s container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}

// ---------------------------------------------------------------- status helpers

func (r *LockedJobReconciler) markScopeNotAllowed(p *pass) {
	msg := fmt.Sprintf("spec.lock.scope Cluster is not allowed in namespace %s: the operator trusts only %v", p.lj.Namespace, r.Config.ClusterScopeNamespaces)
	p.lj.Status.Phase = batchv1alpha1.PhasePending
	p.lj.Status.Message = msg
	setCondition(p.lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonScopeNotAllowed, msg)
}

// redisDown records a Redis failure and returns err for the runtime's backoff.
func (r *LockedJobReconciler) redisDown(p *pass, err error) error {
	msg := fmt.Sprintf("Redis unavailable: %v", err)
	if !conditionFalse(p.lj, batchv1alpha1.ConditionRedisAvailable) {
		r.event(p.lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Redis", "%s", msg)
	}
	setCondition(p.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, msg)
	return err
}

func (r *LockedJobReconciler) redisUp(p *pass) {
	setCondition(p.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionTrue, batchv1alpha1.ReasonRedisOK, "Redis answered")
}

// lockName is the lock's name in the lock library. A lock acquired before is named by the Redis key
// that status recorded at acquisition, so an operator upgraded to a new key layout still re-adopts
// and releases the lock it holds under the old one.
func (r *LockedJobReconciler) lockName(lj *batchv1alpha1.LockedJob) string {
	if lj.Status.FencingToken != nil && lj.Status.LockKey != "" {
		redis := r.Locks.Redis()
		want := r.Config.Identity.LockKey(lj)
		if lj.Status.LockKey == redis.RedisKey(want) {
			return want
		}
		if name, ok := libraryKey(lj.Status.LockKey, redis.RedisKey("")); ok {
			return name
		}
	}
	return r.Config.Identity.LockKey(lj)
}

// libraryKey inverts Client.RedisKey: redisKey is prefix + "{" + name + "}", and empty is
// RedisKey("") = prefix + "{}".
func libraryKey(redisKey, empty string) (string, bool) {
	prefix := strings.TrimSuffix(empty, "{}")
	rest, ok := strings.CutPrefix(redisKey, prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") || len(rest) < 2 {
		return "", false
	}
	return strings.TrimSuffix(rest, "}"), true
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

func lossPolicy(lj *batchv1alpha1.LockedJob) batchv1alpha1.LockLostPolicy {
	if lj.Spec.Lock.OnLockLost == "" {
		return batchv1alpha1.LockLostSuspend
	}
	return lj.Spec.Lock.OnLockLost
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
