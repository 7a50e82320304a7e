package kueuecheck

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// act carries out one step; next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *KueueCheckReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle, stepRunning:
		// A running Job needs no pass until something changes: the Job or its Workload (watched), or
		// the lock (the book renews it and reports a loss).
		return ctrl.Result{}, false, nil
	case stepInvalid:
		r.event(p.job, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Acquire",
			"The Job's lock cannot be read, so its admission check stays Pending: %v", p.obs.invalid)
		return ctrl.Result{}, false, nil
	case stepDone:
		r.Locks.Forget(p.job.UID)
		p.obs.lost, p.obs.released = nil, false
		return ctrl.Result{}, true, nil
	case stepGiveUp:
		return ctrl.Result{}, false, r.giveUp(ctx, p)
	case stepDropFinalizer:
		return ctrl.Result{}, false, r.dropFinalizer(ctx, p)
	case stepScopeNotAllowed:
		return ctrl.Result{}, false, r.markScopeNotAllowed(ctx, p)
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepRecord:
		return ctrl.Result{}, true, r.record(ctx, p)
	case stepAdmit:
		return r.admit(ctx, p)
	case stepReadopt:
		return r.readopt(ctx, p)
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p)
	case stepReleaseAfterLoss:
		return r.releaseAfterLoss(ctx, p)
	case stepRelease:
		return r.release(ctx, p)
	case stepUnguarded:
		return ctrl.Result{}, false, r.markUnguarded(ctx, p)
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}
