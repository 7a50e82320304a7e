package guardedjob

import (
	"errors"
	"testing"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// TestDecide: the state machine of a guarded Job, one row per situation a pass can see.
func TestDecide(t *testing.T) {
	held := &lockbook.Lock{}
	lost := errors.New("lost")
	waiting := observation{suspended: true, scopeAllowed: true}
	running := observation{fenced: true, hasFinalizer: true, guard: batchv1alpha1.GuardHeld, scopeAllowed: true, holding: held}
	with := func(o observation, f func(*observation)) observation { f(&o); return o }
	for name, tc := range map[string]struct {
		obs  observation
		want step
	}{
		"a label or annotation that does not parse":      {with(waiting, func(o *observation) { o.invalid = errors.New("bad ttl") }), stepInvalid},
		"suspended by the gate, not holding":             {waiting, stepAcquire},
		"holding, still suspended":                       {with(waiting, func(o *observation) { o.holding = held }), stepUnsuspend},
		"holding, unsuspended: running":                  {running, stepRunning},
		"the record says held, the book does not":        {with(running, func(o *observation) { o.holding = nil }), stepReadopt},
		"the book reports a loss":                        {with(running, func(o *observation) { o.lost = lost }), stepLoseLock},
		"a loss before a finished Job: Lost wins":        {with(running, func(o *observation) { o.lost, o.finished = lost, true }), stepLoseLock},
		"Lost, finalizer still on":                       {with(running, func(o *observation) { o.guard = batchv1alpha1.GuardLost }), stepReleaseAfterLoss},
		"Lost and let go":                                {with(running, func(o *observation) { o.guard, o.hasFinalizer = batchv1alpha1.GuardLost, false }), stepDone},
		"the Job completed or failed":                    {with(running, func(o *observation) { o.finished = true }), stepFinish},
		"finished after a restart (book empty)":          {with(running, func(o *observation) { o.finished, o.holding = true, nil }), stepFinish},
		"its pod succeeded, the condition still to come": {with(running, func(o *observation) { o.settled = true }), stepReleaseAtOutcome},
		"pod succeeded, after a restart (book empty)":    {with(running, func(o *observation) { o.settled, o.holding = true, nil }), stepReleaseAtOutcome},
		"pod succeeded, but the lock was lost":           {with(running, func(o *observation) { o.settled, o.lost = true, lost }), stepLoseLock},
		"Released":                                       {with(running, func(o *observation) { o.guard, o.hasFinalizer, o.finished = batchv1alpha1.GuardReleased, false, true }), stepDone},
		"labelled but created running":                   {observation{scopeAllowed: true}, stepUnguarded},
		"labelled later, already finished":               {observation{scopeAllowed: true, finished: true}, stepUnguarded},
		"unsuspended by someone else while we held":      {with(waiting, func(o *observation) { o.suspended, o.holding = false, held }), stepUnguarded},
		"marked Unguarded":                               {observation{guard: batchv1alpha1.GuardUnguarded}, stepDone},
		"Cluster scope refused":                          {with(waiting, func(o *observation) { o.scopeAllowed = false }), stepScopeNotAllowed},
		"Cluster scope refused, already told":            {with(waiting, func(o *observation) { o.scopeAllowed, o.guard = false, batchv1alpha1.GuardScopeNotAllowed }), stepIdle},
		"Cluster scope refused, created running":         {observation{}, stepUnguarded},
		"ended while suspended, never ran":               {with(waiting, func(o *observation) { o.finished = true }), stepIdle},
		"deleted waiter (no finalizer)":                  {with(waiting, func(o *observation) { o.deleting = true }), stepIdle},
		"deleted while held":                             {with(running, func(o *observation) { o.deleting = true }), stepDeleteRelease},
		"deleted while held, after a restart":            {with(running, func(o *observation) { o.deleting, o.holding = true, nil }), stepDeleteReadopt},
		"deleted, re-adoption found it lost: say so":     {with(running, func(o *observation) { o.deleting, o.holding, o.lost = true, nil, lost }), stepLoseLock},
		"deleted by its policy after a loss: say so":     {with(running, func(o *observation) { o.deleting, o.lost = true, lost }), stepLoseLock},
		"deleted after Lost":                             {with(running, func(o *observation) { o.deleting, o.holding, o.guard = true, nil, batchv1alpha1.GuardLost }), stepDeleteRelease},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.obs); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStepNames: every step has its name.
func TestStepNames(t *testing.T) {
	if len(stepNames) != int(stepDeleteRelease)+1 {
		t.Fatalf("%d step names for %d steps", len(stepNames), stepDeleteRelease+1)
	}
}
