package lockedjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Acquiring (stepAcquire): validate the Job once, then ask for the lock as a queued waiter, or give
// up after spec.lock.acquireTimeout.

// redisCtx bounds one Redis call of a pass.
func (r *LockedJobReconciler) redisCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.Config.RedisTimeout)
}

// acquire validates the Job, then acquires the lock or records why the LockedJob waits.
func (r *LockedJobReconciler) acquire(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj, now := p.lj, r.Clock.Now()
	first := lj.Status.WaitingSince == nil
	if first {
		if refused, err := r.startWaiting(ctx, p, now); refused || err != nil {
			return ctrl.Result{}, false, err
		}
	}
	lj.Status.LockKey = r.Locks.RedisKey(p.claim.Key)
	waited := now.Sub(lj.Status.WaitingSince.Time)
	if t := lj.Spec.Lock.AcquireTimeout; t != nil && waited >= t.Duration {
		return ctrl.Result{}, false, r.giveUp(ctx, p, t.Duration)
	}

	permits, err := r.permits.Of(ctx, locks.ClaimantOf(lj))
	if err != nil {
		return ctrl.Result{}, false, err
	}
	p.permits = permits
	if r.Locks.Admits(permits) < permits {
		return r.waitForPermits(p, permits), false, nil
	}

	// A waiter asks Redis only when something may have changed (the wait book, package waitbook).
	if !first {
		switch what, hint, left, priority := r.waiting.Next(p.claim.Holder, now); what {
		case waitbook.AskHint:
			// The place comes from Redis (the lineup); the holder stays what Redis last told.
			return r.wait(p, &lockbook.QueuedError{Position: hint.Position, Holder: lj.Status.BlockedBy}, waited), false, nil
		case waitbook.AskNothing:
			return ctrl.Result{RequeueAfter: left, Priority: &priority}, false, nil
		}
	}

	if holder, busy, err := r.legacyHolder(ctx, p); err != nil {
		return ctrl.Result{}, false, r.redisDown(p, err)
	} else if busy {
		return r.wait(p, &lockbook.QueuedError{Position: 1, Holder: holder}, waited), false, nil
	}

	rctx, cancel := r.redisCtx(ctx)
	lock, err := r.Locks.Acquire(rctx, p.lockClaim(), ttlOf(lj), r.Config.Identity.QueueScore(locks.ClaimantOf(lj)), r.Config.waiterLiveness())
	cancel()
	if errors.Is(err, lockbook.ErrNotAcquired) {
		return r.wait(p, err, waited), false, nil
	}
	if err != nil {
		// The wake-up that led here was consumed by a call that got no answer: the retry asks.
		r.waiting.Wake(p.claim.Holder)
		return ctrl.Result{}, false, r.redisDown(p, fmt.Errorf("acquire %s: %w", p.claim.Key, err))
	}
	if err := r.holdAcquired(ctx, p, lock, waited); err != nil {
		return ctrl.Result{}, false, err
	}
	return ctrl.Result{}, true, nil
}

// waitForPermits keeps a LockedJob waiting whose lock declares more permits than Redlock can
// grant: each Redlock node would choose a slot on its own, and no slot might reach a majority. It
// asks again when the Lock changes (wakeOnPermits) and on the longest backoff.
func (r *LockedJobReconciler) waitForPermits(p *pass, permits int) ctrl.Result {
	lj := p.lj
	msg := locks.RedlockRefusal(lj.Spec.Lock.Name, permits)
	if lj.Status.Phase != batchv1alpha1.PhaseWaiting || lj.Status.Message != msg {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonPermitsUnsupported, "Acquire", "%s", msg)
	}
	tell(lj, permitsRefused(msg))
	return ctrl.Result{RequeueAfter: r.Config.WaitBackoffMax}
}

// startWaiting records the first attempt and validates the Job: the Job API refuses some templates
// only at create, and finding out after acquiring the lock would hold it for nothing. The template
// is immutable, so once is enough. refused reports a Job the API server will never accept.
func (r *LockedJobReconciler) startWaiting(ctx context.Context, p *pass, now time.Time) (refused bool, err error) {
	lj := p.lj
	lj.Status.WaitingSince = &metav1.Time{Time: now}
	tell(lj, pending())
	if err := r.validateJob(ctx, p); err != nil {
		if isRefusal(err) {
			r.failJobInvalid(p, err)
			return true, nil
		}
		return false, err
	}
	r.warnShortTTL(lj)
	return false, nil
}

// holdAcquired records a fresh acquisition and has the book renew the lock from now on.
func (r *LockedJobReconciler) holdAcquired(ctx context.Context, p *pass, lock *lockbook.Lock, waited time.Duration) error {
	lj := p.lj
	r.redisUp(p)
	if gap, handed := r.waiting.Acquired(p.claim.Holder, time.Now()); handed {
		handoffSeconds.Observe(gap.Seconds())
	}
	locksAcquiredTotal.Inc()
	lockWaitSeconds.Observe(waited.Seconds())
	r.recordGrant(p, lock)
	if err := r.Locks.Track(workloadOf(lj), lock, renewIntervalOf(lj)); err != nil {
		return fmt.Errorf("renew %s: %w", p.claim.Key, err)
	}
	p.obs.holding = lock
	ctrl.LoggerFrom(ctx).Info("Acquired lock", "lock", p.claim.Key, "fencingToken", lock.Fence(), "slot", lock.Slot())
	p.acquired = fmt.Sprintf("Acquired lock %s with fencing token %d%s after waiting %s", lj.Spec.Lock.Name, lock.Fence(), slotPhrase(lj.Status.Slot), waited.Round(time.Millisecond))
	lj.Status.AcquiredAt = &metav1.Time{Time: lock.LeaseStart()}
	return nil
}

// legacyHolder reports whether the lock is held under the key layout of an earlier version (see
// docs/design.md, "Migration"), whose holder then blocks this acquisition as any holder would. A
// legacy key held with this LockedJob's own token was handed to it as a queued waiter: it is given
// back instead of waited for. Costs one Redis call while Config.LegacyLockKeys is on.
func (r *LockedJobReconciler) legacyHolder(ctx context.Context, p *pass) (holder string, busy bool, err error) {
	legacy, ok := r.Config.Identity.LegacyLockKey(locks.ClaimantOf(p.lj))
	if !r.Config.LegacyLockKeys || !ok || legacy == p.claim.Key {
		return "", false, nil
	}
	rctx, cancel := r.redisCtx(ctx)
	defer cancel()
	st, err := r.Locks.Inspect(rctx, legacy)
	if err != nil || !st.Held {
		return "", false, err
	}
	old := p.lockClaim()
	old.Key = legacy
	err = r.Locks.Release(rctx, old)
	switch {
	case err == nil:
		return "", false, nil
	case errors.Is(err, lockbook.ErrNotHeld):
		return st.Metadata, true, nil
	default:
		return "", false, err
	}
}

// validateJob asks the API server to create the Job as a dry run, so admission and validation speak
// before the lock is acquired. The name is one no acquisition gets (fence 0).
func (r *LockedJobReconciler) validateJob(ctx context.Context, p *pass) error {
	job, err := buildJob(p.lj, jobName(p.lj, 0), 0, p.claim.Holder, r.Scheme)
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
	tell(lj, failedBefore(batchv1alpha1.ReasonJobInvalid, msg))
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonJobInvalid, "ValidateJob", "%s", msg)
}

// warnShortTTL says once when the lease is too short for the round trip to Redis the keeper
// measures (docs/design.md, Failure modes: the smallest ttl a round trip allows), or cannot outlive
// a leader change: a successor operator re-adopts only after the old leader's lease ends, by which
// time this lock has expired.
func (r *LockedJobReconciler) warnShortTTL(lj *batchv1alpha1.LockedJob) {
	if short, rtt, least := r.Locks.ShortLease(ttlOf(lj)); short {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonTTLBelowRoundTrip, "Acquire",
			"spec.lock.ttl %s is too short for the round trip to Redis the operator measures (%s; the smallest ttl it allows is %s): a renewal may not be answered before the lease is at risk, and the Job would be stopped",
			ttlOf(lj), rtt, least)
	}
	ttl, interval := ttlOf(lj), renewalPeriod(lj)
	if outlivesFailover(ttl, interval, r.Config.FailoverTime) {
		return
	}
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonTTLBelowFailover, "Acquire",
		"spec.lock.ttl %s, renewed every %s, leaves %s after a renewal, not longer than the operator's failover time %s: if the operator's leader changes while the Job runs, the lock can expire before a successor renews it, and the Job's lock is lost",
		ttl, interval, ttl-interval, r.Config.FailoverTime)
}

// outlivesFailover reports whether a lease of ttl renewed every interval survives a leader change
// that takes failover (0: not known, nothing to judge). The leader may die just before a renewal,
// so what is left of the lease then is ttl − interval, not ttl: with the defaults (30s, renewed
// every 10s, a 15s leader lease) 20s, of which the successor's start and its first pass over the
// LockedJobs use the last 5s (docs/fault.md, chaos at scale).
func outlivesFailover(ttl, interval, failover time.Duration) bool {
	return failover <= 0 || ttl-interval > failover
}

// giveUp fails a LockedJob that waited longer than spec.lock.acquireTimeout.
func (r *LockedJobReconciler) giveUp(ctx context.Context, p *pass, timeout time.Duration) error {
	lj := p.lj
	if err := r.dequeue(ctx, p); err != nil {
		return err
	}
	r.waiting.Done(p.claim.Holder)
	msg := fmt.Sprintf("Lock %s not acquired within spec.lock.acquireTimeout (%s)", lj.Spec.Lock.Name, timeout)
	tell(lj, failedBefore(batchv1alpha1.ReasonLockTimeout, msg))
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonLockTimeout, "Acquire", "%s", msg)
	return nil
}
