package guardedpod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The steps of the state machine (see decide) live in one file each by what they do: acquire.go
// (acquire, wait, ungate), readopt.go, end.go (finish, lose, unguarded, delete). Each acts on Redis
// (through the lock book) or on the Pod, and writes what it reached into the Pod's own annotations
// by one optimistic merge patch (record.go).

// act carries out one step. next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *GuardedPodReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle, stepRunning, stepWaitStopped:
		// Nothing until something changes: the Pod (watched: its phase, its deletion), or the lock
		// (the keeper renews it and the book reports a loss).
		return ctrl.Result{}, false, nil
	case stepInvalid:
		r.event(p.pod, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Acquire",
			"The Pod's lock cannot be read, so the operator does not guard it: %v", p.obs.invalid)
		return ctrl.Result{}, false, nil
	case stepDone:
		r.Locks.Forget(p.pod.UID)
		return ctrl.Result{}, false, nil
	case stepUnguarded:
		return ctrl.Result{}, false, r.markUnguarded(ctx, p)
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p)
	case stepReleaseAfterLoss:
		return ctrl.Result{}, false, r.end(ctx, p, batchv1alpha1.GuardLost)
	case stepFinish:
		return ctrl.Result{}, false, r.finish(ctx, p)
	case stepReadopt, stepDeleteReadopt:
		return r.readopt(ctx, p)
	case stepScopeNotAllowed:
		return ctrl.Result{}, false, r.markScopeNotAllowed(ctx, p)
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepUngate:
		return ctrl.Result{}, false, r.ungate(ctx, p)
	case stepDeleteRelease:
		return ctrl.Result{}, false, r.deleteRelease(ctx, p)
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}
