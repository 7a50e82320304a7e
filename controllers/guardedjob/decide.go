package guardedjob

import (
	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// observation is everything one pass sees before it decides: the Job's own record (its
// annotations, suspend, conditions, finalizer) and the operator's lock book. decide reads nothing
// else, so every combination can be checked in a table test.
type observation struct {
	// invalid is why the Job's label or annotations do not make a claim (locks.ClaimantOfJob).
	invalid      error
	deleting     bool // deletionTimestamp set
	hasFinalizer bool // ours
	suspended    bool
	finished     bool // Complete or Failed
	// fenced: the Job carries our fence annotation, which only the unsuspend PATCH writes, so the
	// operator unsuspended it under the lock at some point.
	fenced       bool
	guard        batchv1alpha1.GuardState // the Job's guard annotation
	scopeAllowed bool                     // the operator lets this namespace use a lock of its scope

	holding  *lockbook.Lock // the book's lock, healthy or at risk
	lost     error          // the book's record of a loss (or a lease at risk)
	released bool           // the book released the lock after the Job ended
	// settled: the Job has not finished, but its pods say nothing of it can run again
	// (sreconcile.OutcomeSettled), so its lock may go before the Job controller's condition.
	settled bool
}

// step is what one pass does; decide picks exactly one. Some steps lead to another in the same
// pass (acquire → unsuspend), which Reconcile does by deciding again.
type step int

const (
	stepIdle             step = iota // nothing to do
	stepInvalid                      // the label or an annotation does not parse: tell the user
	stepDone                         // an end is recorded: drop the book's record
	stepUnguarded                    // it runs, or ran, without our lock: tell, never hold
	stepLoseLock                     // the book reports a loss: stop the Job by policy, record Lost
	stepReleaseAfterLoss             // Lost: once its pods are gone, release what is ours, drop the finalizer
	stepFinish                       // the Job ended: release once its pods stopped, record Released
	stepReleaseAtOutcome             // its pod succeeded, its condition is still to come: release now, record Released
	stepReadopt                      // the record says held, the book does not (a restart): re-adopt
	stepScopeNotAllowed              // Cluster scope from an untrusted namespace: no Redis, tell
	stepAcquire                      // suspended, not holding: acquire with the queue, or wait
	stepUnsuspend                    // holding, still suspended: the one unsuspend PATCH
	stepRunning                      // holding, unsuspended: renewals are the keeper's
	stepDeleteReadopt                // deleting, the record says held: re-adopt so the lock covers the pods
	stepDeleteRelease                // deleting: wait for the pods, release or leave the queue, drop the finalizer
)

var stepNames = [...]string{"Idle", "Invalid", "Done", "Unguarded", "LoseLock", "ReleaseAfterLoss", "Finish",
	"ReleaseAtOutcome", "Readopt", "ScopeNotAllowed", "Acquire", "Unsuspend", "Running", "DeleteReadopt", "DeleteRelease"}

func (s step) String() string { return stepNames[s] }

// decide is the state machine of a guarded Job: the next step for what a pass observed. It is pure.
func decide(o observation) step {
	if o.invalid != nil {
		return stepInvalid
	}
	if o.deleting {
		return decideDeletion(o)
	}
	switch {
	case o.guard == batchv1alpha1.GuardLost && o.hasFinalizer:
		return stepReleaseAfterLoss
	case ended(o.guard):
		return stepDone
	case o.lost != nil && o.fenced:
		// Before a finished Job on purpose: we cannot tell whether the lock was lost before or after
		// the Job's last write, so Lost is the honest record.
		return stepLoseLock
	case o.fenced && o.finished:
		return stepFinish
	case o.fenced && o.settled:
		// Before re-adoption: after a restart the lock is released by its token.
		return stepReleaseAtOutcome
	case !o.fenced && !o.suspended:
		// Labelled, running, and we never unsuspended it: no gate, a label added later, or someone
		// else unsuspended it. Never a holder.
		return stepUnguarded
	case o.fenced && o.holding == nil && !o.released:
		return stepReadopt
	case o.fenced:
		return stepRunning
	case o.finished:
		return stepIdle // ended while suspended, never ran: nothing to guard
	case !o.scopeAllowed:
		if o.guard == batchv1alpha1.GuardScopeNotAllowed {
			return stepIdle
		}
		return stepScopeNotAllowed
	case o.holding == nil:
		return stepAcquire
	default:
		return stepUnsuspend
	}
}

// decideDeletion: the lock is held until the Job's pods are gone, so the next holder never starts
// beside pods that are still running.
func decideDeletion(o observation) step {
	switch {
	case !o.hasFinalizer:
		return stepIdle // a waiter (no finalizer): its place in line goes with the queue's liveness
	case o.lost != nil && o.fenced && !ended(o.guard):
		// Deleted by its on-lock-lost policy (or by its user) after the loss: record Lost and say
		// why before it goes, since no other pass will.
		return stepLoseLock
	case o.fenced && o.holding == nil && o.lost == nil && !o.released && !ended(o.guard):
		return stepDeleteReadopt
	default:
		return stepDeleteRelease
	}
}

// ended reports a guard state after which the Job holds nothing and is never a holder again.
func ended(g batchv1alpha1.GuardState) bool {
	return g == batchv1alpha1.GuardReleased || g == batchv1alpha1.GuardLost || g == batchv1alpha1.GuardUnguarded
}
