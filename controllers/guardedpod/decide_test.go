package guardedpod

import (
	"errors"
	"testing"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// TestDecide: the state machine of a guarded Pod, one row per situation a pass can see.
func TestDecide(t *testing.T) {
	held := &lockbook.Lock{}
	lost := errors.New("lost")
	waiting := observation{gated: true, scopeAllowed: true}
	running := observation{fenced: true, hasFinalizer: true, guard: batchv1alpha1.GuardHeld, scopeAllowed: true, holding: held}
	with := func(o observation, f func(*observation)) observation { f(&o); return o }
	for name, tc := range map[string]struct {
		obs  observation
		want step
	}{
		"a label or annotation that does not parse":     {with(waiting, func(o *observation) { o.invalid = errors.New("bad ttl") }), stepInvalid},
		"gated by the admission gate, not holding":      {waiting, stepAcquire},
		"holding, still gated":                          {with(waiting, func(o *observation) { o.holding = held }), stepUngate},
		"holding, ungated: running":                     {running, stepRunning},
		"the record says held, the book does not":       {with(running, func(o *observation) { o.holding = nil }), stepReadopt},
		"the book reports a loss":                       {with(running, func(o *observation) { o.lost = lost }), stepLoseLock},
		"a loss before an ended Pod: Lost wins":         {with(running, func(o *observation) { o.lost, o.ended, o.runsNothing = lost, true, true }), stepLoseLock},
		"Lost, its deletion under way":                  {with(running, func(o *observation) { o.guard = batchv1alpha1.GuardLost }), stepWaitStopped},
		"Lost, it runs nothing any more":                {with(running, func(o *observation) { o.guard, o.runsNothing = batchv1alpha1.GuardLost, true }), stepReleaseAfterLoss},
		"Lost and let go":                               {with(running, func(o *observation) { o.guard, o.hasFinalizer = batchv1alpha1.GuardLost, false }), stepDone},
		"the Pod succeeded or failed":                   {with(running, func(o *observation) { o.ended, o.runsNothing = true, true }), stepFinish},
		"ended after a restart (book empty)":            {with(running, func(o *observation) { o.ended, o.runsNothing, o.holding = true, true, nil }), stepFinish},
		"Released":                                      {with(running, func(o *observation) { o.guard, o.hasFinalizer, o.ended = batchv1alpha1.GuardReleased, false, true }), stepDone},
		"labelled but created without the gate":         {observation{scopeAllowed: true}, stepUnguarded},
		"labelled later, already ended":                 {observation{scopeAllowed: true, ended: true, runsNothing: true}, stepUnguarded},
		"ungated by someone else while we waited":       {with(waiting, func(o *observation) { o.gated = false }), stepUnguarded},
		"ungated by someone else while we held":         {with(waiting, func(o *observation) { o.gated, o.holding = false, held }), stepUnguarded},
		"marked Unguarded":                              {observation{guard: batchv1alpha1.GuardUnguarded}, stepDone},
		"Cluster scope refused":                         {with(waiting, func(o *observation) { o.scopeAllowed = false }), stepScopeNotAllowed},
		"Cluster scope refused, already told":           {with(waiting, func(o *observation) { o.scopeAllowed, o.guard = false, batchv1alpha1.GuardScopeNotAllowed }), stepIdle},
		"Cluster scope refused, created without a gate": {observation{}, stepUnguarded},
		"deleted waiter (no finalizer)":                 {with(waiting, func(o *observation) { o.deleting = true }), stepIdle},
		"deleted while held, containers stopping":       {with(running, func(o *observation) { o.deleting = true }), stepWaitStopped},
		"deleted while held, it runs nothing":           {with(running, func(o *observation) { o.deleting, o.runsNothing = true, true }), stepDeleteRelease},
		"deleted while held, after a restart":           {with(running, func(o *observation) { o.deleting, o.holding = true, nil }), stepDeleteReadopt},
		"deleted, re-adoption found it lost: say so":    {with(running, func(o *observation) { o.deleting, o.holding, o.lost = true, nil, lost }), stepLoseLock},
		"deleted by its policy after a loss: say so":    {with(running, func(o *observation) { o.deleting, o.lost = true, lost }), stepLoseLock},
		"deleted after Lost, stopping":                  {with(running, func(o *observation) { o.deleting, o.holding, o.guard = true, nil, batchv1alpha1.GuardLost }), stepWaitStopped},
		"deleted after Lost, it runs nothing": {with(running, func(o *observation) {
			o.deleting, o.holding, o.guard, o.runsNothing = true, nil, batchv1alpha1.GuardLost, true
		}), stepDeleteRelease},
		"deleted after Released, finalizer still on": {with(running, func(o *observation) {
			o.deleting, o.guard, o.ended, o.runsNothing = true, batchv1alpha1.GuardReleased, true, true
		}), stepDeleteRelease},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.obs); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestDecideNeverReleasesWhileItMayRun: whatever the record and the book say, no step that releases
// the lock is taken for a Pod whose containers may still run, unless its end was never ours to
// guard (Unguarded) or its loss says so first.
func TestDecideNeverReleasesWhileItMayRun(t *testing.T) {
	releasing := map[step]bool{stepFinish: true, stepReleaseAfterLoss: true, stepDeleteRelease: true}
	for _, deleting := range []bool{false, true} {
		{ // an ended Pod runs nothing by definition
			for _, g := range []batchv1alpha1.GuardState{"", batchv1alpha1.GuardHeld, batchv1alpha1.GuardLost, batchv1alpha1.GuardReleased} {
				for _, holding := range []*lockbook.Lock{nil, {}} {
					o := observation{deleting: deleting, runsNothing: false, guard: g, holding: holding,
						fenced: true, hasFinalizer: true, scopeAllowed: true}
					if st := decide(o); releasing[st] {
						t.Errorf("decide(%+v) = %s while the Pod may run", o, st)
					}
				}
			}
		}
	}
}

// TestStepNames: every step has its name.
func TestStepNames(t *testing.T) {
	if len(stepNames) != int(stepWaitStopped)+1 {
		t.Fatalf("%d step names for %d steps", len(stepNames), stepWaitStopped+1)
	}
}
