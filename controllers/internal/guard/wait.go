package guard

import (
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Waiting in line as the LockedJobs do (package waitbook): a guarded waiter behind those a freed
// permit goes to asks Redis only when a release or the queue keeper wakes it, or at the long
// re-check; the head asks on its backoff, since nobody announces a lock freed by an expiry. A
// guarded waiter records no place, so it takes no hints.

// Asks reports whether the pass of a waiting claimant asks Redis now; if not, res is the wait
// that is left. A claimant the wait book does not know asks.
func (ro Holdings) Asks(claim lockbook.Claim, now time.Time) (res ctrl.Result, ask bool) {
	if ro.Waiting == nil {
		return ctrl.Result{}, true
	}
	switch what, _, left, priority := ro.Waiting.Next(claim.Holder, now); what {
	case waitbook.AskNothing:
		return ctrl.Result{RequeueAfter: left, Priority: &priority}, false
	default:
		return ctrl.Result{}, true
	}
}

// Wait records, at now, a claimant that did not get the lock (notAcquired, from Acquire) and has
// waited for waited so far, and returns when it asks again.
func (ro Holdings) Wait(claim lockbook.Claim, w lockbook.Workload, notAcquired error, now time.Time, waited time.Duration) ctrl.Result {
	next, priority := ro.Config.WaitBackoff(waited), 0
	if qe, ok := errors.AsType[*lockbook.QueuedError](notAcquired); ok && qe.Position > max(claim.Permits, 1) && ro.Locks.HandsOff() {
		// Behind those a free permit goes to: a handoff wakes this waiter and the queue keeper keeps
		// it queued, so a re-check is a safety net, and under a burst it yields to the passes events
		// ask for.
		next, priority = Jitter(ro.Config.QueueRecheck), handler.LowPriority
	}
	if ro.Waiting != nil {
		ro.Waiting.Waiting(claim.Holder, w.Object, claim.Key, now.Add(next), priority)
	}
	return ctrl.Result{RequeueAfter: next, Priority: &priority}
}
