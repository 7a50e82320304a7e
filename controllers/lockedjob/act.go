package lockedjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The steps of the state machine (see decide) live in one file each by what they do: acquire.go,
// wait.go, readopt.go, run.go, end.go, delete.go. Each acts on Redis (through the lock book) or the
// API server and records what happened in p.lj.Status; Reconcile writes that status once, at the end
// of the pass (record.go).

// act carries out one step. next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *LockedJobReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle:
		return ctrl.Result{}, false, nil
	case stepAddFinalizer:
		if err := r.addFinalizer(ctx, p); err != nil {
			return ctrl.Result{}, false, err
		}
		// Go on in this pass: waiting for the finalizer's own update event put every LockedJob of a
		// burst behind the finalizers of all the others before its first Job.
		p.before, p.obs.hasFinalizer = p.lj.DeepCopy(), true
		return ctrl.Result{}, true, nil
	case stepForget:
		r.Locks.Forget(p.lj.UID)
		r.waiting.Done(p.claim.Holder)
		return ctrl.Result{}, false, r.letGo(ctx, p)
	case stepReleaseAfterEnd:
		res, err = r.releaseAfterEnd(ctx, p)
		return res, false, err
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p, p.obs.lost)
	case stepFinish:
		next, err := r.finish(ctx, p)
		return ctrl.Result{}, next, err
	case stepReleaseAtOutcome:
		next, err := r.releaseAtOutcome(ctx, p)
		return ctrl.Result{}, next, err
	case stepAwaitOutcome:
		// The Job's condition comes through the Job watch, unless its label was taken away.
		return r.recheckUnwatched(p.obs.job), false, nil
	case stepReadopt:
		return r.readopt(ctx, p)
	case stepJobGone:
		res, err = r.jobGone(ctx, p)
		return res, false, err
	case stepScopeNotAllowed:
		r.markScopeNotAllowed(p)
		return ctrl.Result{}, false, nil // the user must act; retrying changes nothing
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepCreateJob:
		return r.createJob(ctx, p)
	case stepRunning:
		r.recordRunning(p)
		// A pod's waiting reason changes without the Job changing: look again soon while no pod is
		// ready, so a missing image shows in status within seconds. Otherwise a running Job needs no
		// pass until something changes: the Job (watched), or the lock (the keeper reports a loss).
		if mayBeStuck(p.obs.job) {
			// At the usual priority, not the urgent one of the handoff that started this Job.
			return ctrl.Result{RequeueAfter: stuckRecheck, Priority: ptr.To(0)}, false, nil
		}
		return r.recheckUnwatched(p.obs.job), false, nil
	case stepDeleteReadopt:
		return r.deleteReadopt(ctx, p)
	case stepDeleteJob:
		return r.deleteJob(ctx, p)
	case stepDeleteRelease:
		res, err = r.deleteRelease(ctx, p)
		return res, false, err
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}

// recheckUnwatched looks at a Job again later when the cache does not follow it (someone took its
// label away): no event will tell of its end.
func (r *LockedJobReconciler) recheckUnwatched(job *batchv1.Job) ctrl.Result {
	if watched(job) {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: r.Config.UnwatchedJobRecheck, Priority: ptr.To(0)}
}
