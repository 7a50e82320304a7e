package lockedjob

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Waiting: what a LockedJob that did not get its lock records, and when it asks again.

// wait records a LockedJob that did not get its lock: who blocks it and where it stands in line.
func (r *LockedJobReconciler) wait(p *pass, notAcquired error, waited time.Duration) ctrl.Result {
	lj := p.lj
	// The acquire script answers with our place in line and the holder's name, so waiting costs one
	// round trip per pass.
	var blockedBy string
	place := "in queue"
	var qe *lockbook.QueuedError
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
	tell(lj, waitingFor(batchv1alpha1.ReasonWaiting, msg))
	lj.Status.BlockedBy = blockedBy

	// The head re-checks soon and at the usual priority: nobody announces a lock freed by an expiry,
	// or a handoff whose announcement found it not yet waiting in the cache.
	next, priority := r.waitBackoff(waited), 0
	if qe != nil && qe.Position > max(p.permits, 1) && r.Locks.HandsOff() {
		// Behind those a free permit goes to: handoffs tell this waiter its place and the queue keeper keeps it queued,
		// so a re-check is a safety net, and under a burst it yields to the passes events ask for.
		next, priority = jitter(r.Config.QueueRecheck), handler.LowPriority
	}
	if t := lj.Spec.Lock.AcquireTimeout; t != nil {
		next = min(next, max(t.Duration-waited, time.Millisecond))
	}
	r.waiting.Waiting(p.claim.Holder, client.ObjectKeyFromObject(lj), p.claim.Key, r.Clock.Now().Add(next), priority)
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

// jitter spreads passes that were scheduled together: d/2 up to d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
