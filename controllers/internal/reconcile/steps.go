package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Act carries out one step; next says whether the pass may decide again at once (the step changed
// what the pass observed, and nothing it wrote needs to come back through the cache first).
type Act[S any] func(ctx context.Context, step S) (res ctrl.Result, next bool, err error)

// Steps runs one pass of a reconciler that is a state machine: decide the step from what the pass
// observed, act, and decide again while the act allows it, at most max steps, so that a pass whose
// steps keep asking for more ends rather than spins. A write that lost an optimistic-lock race
// wrote nothing, so the pass ends without an error and runs again soon, on the object as the API
// server has it then.
func Steps[S fmt.Stringer](ctx context.Context, max int, decide func() S, act Act[S]) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var (
		res  ctrl.Result
		next bool
		err  error
	)
	for range max {
		st := decide()
		log.V(1).Info("Reconciling", "step", st.String())
		res, next, err = act(ctx, st)
		if err != nil || !next {
			break
		}
	}
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: ConflictRequeue}, nil
	}
	return res, err
}
