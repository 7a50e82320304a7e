package lockedjob

import (
	batchv1 "k8s.io/api/batch/v1"

	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// observation is everything one pass of Reconcile sees before it decides anything: the LockedJob's
// own record (status), the operator's lock book, and the Job as the API server has it. decide reads
// nothing else, so every combination can be checked in a table test.
type observation struct {
	deleting     bool // deletionTimestamp set
	hasFinalizer bool
	terminal     bool // phase Succeeded, Failed or LockLost
	// lockRecorded: status says this LockedJob holds its lock (LockAcquired True), so an operator
	// without the lock in its book must re-adopt it before anything else.
	lockRecorded bool
	scopeAllowed bool // the operator lets this namespace acquire a lock of its scope

	holding *lockbook.Lock // the book's lock, healthy or at risk
	lost    error          // the book's record of a loss (or a lease at risk)
	// released: the lock was given back, after the Job ended or at its pod's outcome (the book
	// says so, or status records the release, which outlives a restart).
	released bool

	job        *batchv1.Job // the Job of this acquisition, from the cache or else the API server
	jobCreated bool         // status (or the book, newer than a stale status) has the Job's UID: it was created
	// settled: the Job's pods say nothing of it runs again, before its condition says it ended
	// (reconcile.OutcomeSettled); looked at only while the lock may be held.
	settled bool
	// stuck says why the Job's pod cannot start (an image that is not there, a config error), in
	// the kubelet's words; empty when no pod is stuck or the Job has ready pods.
	stuck string
}

// step is what one pass does; decide picks exactly one. Some steps lead to another in the same
// pass (acquire → create the Job), which Reconcile does by deciding again.
type step int

const (
	stepIdle             step = iota // nothing to do
	stepAddFinalizer                 // before anything is acquired, so deletion can release it
	stepForget                       // finished and recorded: drop the book's record and, once no Job runs, the finalizer
	stepReleaseAfterEnd              // finished, but a lock is still held: release it once the pods are gone
	stepLoseLock                     // the lock is lost or at risk: stop the Job by policy, then LockLost
	stepFinish                       // the Job ended: release, then Succeeded/Failed (LockLost if the lock was not ours)
	stepReleaseAtOutcome             // the Job's pod succeeded, its condition is still to come: release now
	stepAwaitOutcome                 // released at the pod's outcome: wait for the Job's condition to record it
	stepReadopt                      // status says we hold the lock, the book does not: re-adopt it
	stepJobGone                      // the Job was deleted out of band: wait for its pods, release, Failed
	stepScopeNotAllowed              // not holding, and the scope is not allowed here: wait for the user
	stepAcquire                      // not holding: validate the Job, then acquire the lock or wait
	stepCreateJob                    // holding, no Job yet: record the fence, then create the Job
	stepRunning                      // holding, the Job runs: record it
	stepDeleteReadopt                // deleting, status says we hold the lock: re-adopt before waiting for pods
	stepDeleteJob                    // deleting, the Job runs: delete it
	stepDeleteRelease                // deleting: wait for the pods, release, dequeue, drop the finalizer
)

var stepNames = [...]string{"Idle", "AddFinalizer", "Forget", "ReleaseAfterEnd", "LoseLock", "Finish",
	"ReleaseAtOutcome", "AwaitOutcome", "Readopt", "JobGone", "ScopeNotAllowed", "Acquire", "CreateJob", "Running", "DeleteReadopt",
	"DeleteJob", "DeleteRelease"}

func (s step) String() string { return stepNames[s] }

// decide is the state machine: the next step for what a pass observed. It is pure.
func decide(o observation) step {
	if o.deleting {
		return decideDeletion(o)
	}
	switch {
	case o.terminal && !o.hasFinalizer && o.holding == nil:
		return stepIdle // finished and let go (see stepForget): nothing left to guard
	case !o.hasFinalizer:
		return stepAddFinalizer
	case o.terminal && (o.holding != nil || (o.lockRecorded && !o.released && o.lost == nil)):
		return stepReleaseAfterEnd
	case o.terminal:
		return stepForget
	case o.lost != nil:
		// Before a finished Job on purpose: we cannot tell whether the lock was lost before or after
		// the Job's last write, so LockLost is the honest outcome.
		return stepLoseLock
	case o.released && o.job != nil && !reconcile.JobFinished(o.job):
		return stepAwaitOutcome
	case o.released, o.job != nil && reconcile.JobFinished(o.job):
		return stepFinish
	case o.settled && o.job != nil && (o.holding != nil || o.lockRecorded):
		// Before re-adoption: a lock status still records (a restart) is released by its token.
		return stepReleaseAtOutcome
	case o.holding == nil && o.lockRecorded:
		return stepReadopt
	case o.jobCreated && o.job == nil:
		return stepJobGone
	case o.holding == nil && !o.scopeAllowed:
		return stepScopeNotAllowed
	case o.holding == nil:
		return stepAcquire
	case o.job == nil:
		return stepCreateJob
	default:
		return stepRunning
	}
}

// decideDeletion: the lock is held until the Job's pods are gone, so a waiter never starts beside
// pods that are still terminating.
func decideDeletion(o observation) step {
	switch {
	case !o.hasFinalizer:
		return stepIdle
	case !o.terminal && !o.released && o.lockRecorded && o.holding == nil && o.lost == nil:
		return stepDeleteReadopt
	case o.job != nil && !reconcile.JobFinished(o.job) && o.job.DeletionTimestamp.IsZero():
		return stepDeleteJob
	default:
		return stepDeleteRelease
	}
}
