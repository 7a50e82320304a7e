package guardedjob

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The steps of the state machine (see decide) live in one file each by what they do:
// acquire.go (acquire, wait, unsuspend), readopt.go, end.go (finish, lose, unguarded), delete.go.
// Each acts on Redis (through the lock book) or on the Job, and writes what it reached into the
// Job's own annotations by one optimistic merge patch (record.go).

// act carries out one step. next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *GuardedJobReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle:
		return ctrl.Result{}, false, nil
	case stepInvalid:
		// The user must fix the Job (an update starts the next pass); retrying changes nothing.
		r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Acquire",
			"The Job's lock cannot be read, so the operator does not guard it: %v", p.obs.invalid)
		return ctrl.Result{}, false, nil
	case stepDone:
		r.Locks.Forget(p.job.UID)
		return ctrl.Result{}, false, nil
	case stepUnguarded:
		return ctrl.Result{}, false, r.markUnguarded(ctx, p)
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p)
	case stepReleaseAfterLoss:
		res, err = r.releaseAfterLoss(ctx, p)
		return res, false, err
	case stepFinish, stepReleaseAtOutcome:
		return ctrl.Result{}, false, r.finish(ctx, p)
	case stepReadopt, stepDeleteReadopt:
		return r.readopt(ctx, p)
	case stepScopeNotAllowed:
		return ctrl.Result{}, false, r.markScopeNotAllowed(ctx, p)
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepUnsuspend:
		return ctrl.Result{}, false, r.unsuspend(ctx, p)
	case stepRunning:
		// A running Job needs no pass until something changes: the Job (watched), or the lock (the
		// keeper renews it and the book reports a loss).
		return ctrl.Result{}, false, nil
	case stepDeleteRelease:
		res, err = r.deleteRelease(ctx, p)
		return res, false, err
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}
