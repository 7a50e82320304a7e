package kueuecheck

import (
	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// observation is everything one pass sees before it decides: the Job's own record (its
// annotations, suspend, conditions, finalizer), its Workload's quota and our check's state, and
// the operator's lock book. decide reads nothing else, so every combination is a row of a table
// test.
type observation struct {
	// invalid is why the Job's label or annotations do not make a claim (locks.ClaimantOfJob).
	invalid      error
	deleting     bool // the Job's deletionTimestamp is set
	hasFinalizer bool // ours, on the Job
	suspended    bool // the Job's spec.suspend: Kueue's, never ours
	finished     bool // the Job is Complete or Failed
	// held: the Job's record says it holds the lock (guard Held, with our finalizer and the key):
	// written before the check is set Ready, so a restart re-adopts before Kueue can start a pod.
	held         bool
	guard        batchv1alpha1.GuardState // the Job's guard annotation
	scopeAllowed bool                     // the operator lets this namespace use a lock of its scope

	workload         bool   // the Job's Workload exists
	workloadFinished bool   // its Finished condition is True
	quotaReserved    bool   // its QuotaReserved condition is True
	admitted         bool   // its Admitted condition is True: Kueue lets (or let) the Job run
	check            string // the state of our check on it ("" when it has none of ours)

	holding  *lockbook.Lock // the book's lock, healthy or at risk
	lost     error          // the book's record of a loss (or a lease at risk)
	released bool           // the book released the lock
	// settled: the Job has not finished, but its pods say nothing of it can run again
	// (reconcile.OutcomeSettled), so its lock may go before the Job controller's condition.
	settled bool
}

// step is what one pass does; decide picks exactly one. Acquire → record → admit follow in one
// pass, which Reconcile does by deciding again.
type step int

const (
	stepIdle             step = iota // nothing to do
	stepInvalid                      // the label or an annotation does not parse: tell the user
	stepDone                         // an end is recorded: drop the book's record
	stepGiveUp                       // not held, no longer asking: leave the queue if in it
	stepDropFinalizer                // deleting, not held: let the Job go
	stepScopeNotAllowed              // Cluster scope from an untrusted namespace: no Redis, tell
	stepAcquire                      // quota reserved, our check Pending: acquire with the queue, or wait
	stepRecord                       // holding, not recorded: write the record on the Job
	stepAdmit                        // held and recorded, our check Pending: set it Ready with the fence
	stepRunning                      // held, our check Ready: renewals are the book's
	stepReadopt                      // the record says held, the book does not (a restart): re-adopt
	stepLoseLock                     // the book reports a loss: set the check Retry, record Lost
	stepReleaseAfterLoss             // Lost: once the Job is stopped, give back what is ours
	stepRelease                      // held, no longer admitted, ended or its pod succeeded: release once the Job is stopped
	stepUnguarded                    // admitted without our check: it runs without the lock; tell, never hold
)

var stepNames = [...]string{"Idle", "Invalid", "Done", "GiveUp", "DropFinalizer", "ScopeNotAllowed", "Acquire", "Record",
	"Admit", "Running", "Readopt", "LoseLock", "ReleaseAfterLoss", "Release", "Unguarded"}

func (s step) String() string { return stepNames[s] }

// decide is the state machine of a Job that Kueue admits under our check: the next step for what a
// pass observed. It is pure.
func decide(o observation) step {
	switch {
	case o.invalid != nil && !o.held:
		if o.deleting && o.hasFinalizer {
			return stepDropFinalizer
		}
		return stepInvalid
	case o.guard == batchv1alpha1.GuardLost && o.hasFinalizer:
		return stepReleaseAfterLoss
	case o.held:
		return decideHeld(o)
	case o.holding == nil && (o.released || o.lost != nil):
		// The book keeps an end until a pass reads the Job's record of it, so a pass that read the
		// Job from before that record cannot take it for a restart and re-adopt.
		return stepDone
	case o.unguarded():
		if o.guard == batchv1alpha1.GuardUnguarded {
			return stepIdle
		}
		return stepUnguarded
	case o.holding != nil && !o.released && o.lost == nil && o.asks():
		// Acquired in an earlier step of this pass, or a pass whose record write failed.
		return stepRecord
	case o.deleting && o.hasFinalizer:
		return stepDropFinalizer
	case !o.asks():
		return stepGiveUp
	case !o.scopeAllowed:
		if o.guard == batchv1alpha1.GuardScopeNotAllowed {
			return stepIdle
		}
		return stepScopeNotAllowed
	default:
		return stepAcquire
	}
}

// asks reports whether the Job asks for the lock: Kueue reserved quota for its Workload and waits
// for our check, and the Job is suspended (Kueue has not let it run) and has not ended.
func (o observation) asks() bool {
	return o.workload && !o.workloadFinished && o.quotaReserved && o.check == statePending &&
		o.suspended && !o.finished && !o.deleting && o.invalid == nil
}

// unguarded reports a Job that Kueue admitted without our check: its Workload is admitted and
// lists no AdmissionCheck of ours (its ClusterQueue names none), so Kueue lets it run, or let it,
// without the lock. It is the first moment the operator can know: before admission the Workload's
// checks may still change with its ClusterQueue, and Kueue unsuspends the Job only after it. A Job
// that ended after a hold of ours (Released, Lost) ran under the lock, whatever its Workload says
// now. A Job whose Workload lists our check is never unguarded: Kueue suspends again a Job
// unsuspended before its Workload is admitted.
func (o observation) unguarded() bool {
	return o.workload && o.admitted && o.check == "" && !o.held && o.invalid == nil &&
		(!o.finished || o.guard == "")
}

// decideHeld: the record says the Job holds the lock. It keeps it while Kueue admits the Job under
// it; a loss sends the Workload back (Retry); an end (or its pod's success, which settles it), an
// eviction or a deletion releases it, each only once the Job's pods stopped.
func decideHeld(o observation) step {
	switch {
	case o.lost != nil:
		return stepLoseLock
	case o.released || ((o.finished || o.settled) && o.holding == nil):
		// Released and not recorded yet, or ended (or its pod succeeded) while the operator was
		// away: the release by token works without the lock in hand, and finds it not ours if it
		// was lost.
		return stepRelease
	case o.holding == nil:
		// A restart: re-adopt, so the lock is renewed while pods may still run.
		return stepReadopt
	case o.finished || o.settled || o.deleting || !o.workload || o.workloadFinished:
		return stepRelease
	case o.quotaReserved && o.check == stateReady:
		return stepRunning
	case o.quotaReserved && o.check == statePending && !o.finished:
		// Not set Ready yet (the pass that recorded the Job did not get to it), or reset by an
		// eviction that Kueue followed with a new reservation before we saw it: the lock was held
		// throughout, so the same fence covers the next run.
		return stepAdmit
	default:
		// Evicted (the quota is gone), or the check was answered otherwise (Retry, Rejected).
		return stepRelease
	}
}
