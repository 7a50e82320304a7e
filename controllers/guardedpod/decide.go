package guardedpod

import (
	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// observation is everything one pass sees before it decides: the Pod's own record (its
// annotations, our gate, its phase and binding, the finalizer) and the operator's lock book. decide
// reads nothing else, so every combination can be checked in a table test.
type observation struct {
	// invalid is why the Pod's label or annotations do not make a claim (locks.ClaimantOfPod).
	invalid      error
	deleting     bool // deletionTimestamp set
	hasFinalizer bool // ours
	gated        bool // our scheduling gate is on it: it was never scheduled
	// fenced: the Pod carries our fence annotation, which only the ungate PATCH writes (the
	// admission gate refuses it at creation), so the operator ungated it under the lock.
	fenced bool
	ended  bool // phase Succeeded or Failed
	// runsNothing: no container of the Pod runs or will: it ended, or it is being deleted and was
	// never bound to a node (a Pod being deleted is never bound).
	runsNothing  bool
	guard        batchv1alpha1.GuardState // the Pod's guard annotation
	scopeAllowed bool                     // the operator lets this namespace use a lock of its scope

	holding  *lockbook.Lock // the book's lock, healthy or at risk
	lost     error          // the book's record of a loss (or a lease at risk)
	released bool           // the book released the lock after the Pod ended
}

// step is what one pass does; decide picks exactly one. Some steps lead to another in the same
// pass (acquire → ungate), which Reconcile does by deciding again.
type step int

const (
	stepIdle             step = iota // nothing to do
	stepInvalid                      // the label or an annotation does not parse: tell the user
	stepDone                         // an end is recorded: drop the book's record
	stepUnguarded                    // it runs, or may run, without our lock: tell, never hold
	stepLoseLock                     // the book reports a loss: stop the Pod by policy, record Lost
	stepReleaseAfterLoss             // Lost: once it runs nothing, release what is ours, drop the finalizer
	stepFinish                       // the Pod ended: release, record Released
	stepReadopt                      // the record says held, the book does not (a restart): re-adopt
	stepScopeNotAllowed              // Cluster scope from an untrusted namespace: no Redis, tell
	stepAcquire                      // gated, not holding: acquire with the queue, or wait
	stepUngate                       // holding, still gated: the one ungate PATCH
	stepRunning                      // holding, ungated: renewals are the keeper's
	stepDeleteReadopt                // deleting, the record says held: re-adopt so the lock covers it
	stepDeleteRelease                // deleting: once it runs nothing, release, drop the finalizer
	stepWaitStopped                  // held, its end or deletion begun, containers may still run
)

var stepNames = [...]string{"Idle", "Invalid", "Done", "Unguarded", "LoseLock", "ReleaseAfterLoss", "Finish",
	"Readopt", "ScopeNotAllowed", "Acquire", "Ungate", "Running", "DeleteReadopt", "DeleteRelease", "WaitStopped"}

func (s step) String() string { return stepNames[s] }

// decide is the state machine of a guarded Pod: the next step for what a pass observed. It is pure.
func decide(o observation) step {
	if o.invalid != nil {
		return stepInvalid
	}
	if o.deleting {
		return decideDeletion(o)
	}
	switch {
	case o.guard == batchv1alpha1.GuardLost && o.hasFinalizer:
		if !o.runsNothing {
			return stepWaitStopped // under Ignore it runs on; otherwise its deletion is under way
		}
		return stepReleaseAfterLoss
	case ended(o.guard):
		return stepDone
	case o.lost != nil && o.fenced:
		// Before an ended Pod on purpose: we cannot tell whether the lock was lost before or after
		// the Pod's last write, so Lost is the honest record.
		return stepLoseLock
	case o.fenced && o.ended:
		return stepFinish
	case !o.fenced && !o.gated:
		// Labelled, not held back by our gate, and we never ungated it: created while the gate was
		// not in force, or labelled later. Never a holder.
		return stepUnguarded
	case o.fenced && o.holding == nil && !o.released:
		return stepReadopt
	case o.fenced:
		return stepRunning
	case !o.scopeAllowed:
		if o.guard == batchv1alpha1.GuardScopeNotAllowed {
			return stepIdle
		}
		return stepScopeNotAllowed
	case o.holding == nil:
		return stepAcquire
	default:
		return stepUngate
	}
}

// decideDeletion: the lock is held until the Pod runs nothing, so the next holder never starts
// beside containers that are still stopping.
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
	case !o.runsNothing:
		return stepWaitStopped
	default:
		return stepDeleteRelease
	}
}

// ended reports a guard state after which the Pod holds nothing and is never a holder again.
func ended(g batchv1alpha1.GuardState) bool {
	return g == batchv1alpha1.GuardReleased || g == batchv1alpha1.GuardLost || g == batchv1alpha1.GuardUnguarded
}
