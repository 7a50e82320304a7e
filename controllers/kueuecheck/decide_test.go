package kueuecheck

import (
	"errors"
	"testing"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// TestDecide: the state machine of a Job Kueue admits under our check, one row per situation a
// pass can see.
func TestDecide(t *testing.T) {
	lock := &lockbook.Lock{}
	lost := errors.New("lost")
	asking := observation{suspended: true, scopeAllowed: true, workload: true, quotaReserved: true, check: statePending}
	held := func(o observation) observation {
		o.held, o.hasFinalizer, o.guard, o.holding = true, true, batchv1alpha1.GuardHeld, lock
		return o
	}
	running := held(asking)
	running.check, running.suspended = stateReady, false
	with := func(o observation, f func(*observation)) observation { f(&o); return o }
	// admittedWithout: Kueue admitted the Workload and unsuspended the Job, and the Workload lists no
	// check of ours (its ClusterQueue names none).
	admittedWithout := with(asking, func(o *observation) { o.admitted, o.check, o.suspended = true, "", false })
	for name, tc := range map[string]struct {
		obs  observation
		want step
	}{
		"a label or annotation that does not parse":       {with(asking, func(o *observation) { o.invalid = errors.New("bad ttl") }), stepInvalid},
		"quota reserved, our check Pending":               {asking, stepAcquire},
		"no quota yet":                                    {with(asking, func(o *observation) { o.quotaReserved = false }), stepGiveUp},
		"no check of ours":                                {with(asking, func(o *observation) { o.check = "" }), stepGiveUp},
		"no Workload yet":                                 {with(asking, func(o *observation) { o.workload = false }), stepGiveUp},
		"unsuspended by someone else: never a holder":     {with(asking, func(o *observation) { o.suspended = false }), stepGiveUp},
		"acquired, not recorded":                          {with(asking, func(o *observation) { o.holding = lock }), stepRecord},
		"acquired, then the quota went":                   {with(asking, func(o *observation) { o.holding, o.quotaReserved = lock, false }), stepGiveUp},
		"recorded, check still Pending":                   {held(asking), stepAdmit},
		"check Ready: running":                            {running, stepRunning},
		"restart: the record says held, the book not":     {with(running, func(o *observation) { o.holding = nil }), stepReadopt},
		"the book reports a loss":                         {with(running, func(o *observation) { o.lost = lost }), stepLoseLock},
		"a loss of a finished Job: Lost wins":             {with(running, func(o *observation) { o.lost, o.finished = lost, true }), stepLoseLock},
		"Lost, finalizer still on":                        {with(running, func(o *observation) { o.held, o.guard, o.lost = false, batchv1alpha1.GuardLost, lost }), stepReleaseAfterLoss},
		"Lost and let go: the book's record is dropped":   {with(asking, func(o *observation) { o.guard, o.lost = batchv1alpha1.GuardLost, lost }), stepDone},
		"the Job ended":                                   {with(running, func(o *observation) { o.finished = true }), stepRelease},
		"ended after a restart (book empty)":              {with(running, func(o *observation) { o.finished, o.holding = true, nil }), stepRelease},
		"its pod succeeded: release at the outcome":       {with(running, func(o *observation) { o.settled = true }), stepRelease},
		"its pod succeeded, after a restart (book empty)": {with(running, func(o *observation) { o.settled, o.holding = true, nil }), stepRelease},
		"its pod succeeded, and a loss: Lost wins":        {with(running, func(o *observation) { o.settled, o.lost = true, lost }), stepLoseLock},
		"evicted: the quota went":                         {with(running, func(o *observation) { o.quotaReserved, o.check = false, statePending }), stepRelease},
		"evicted and reserved again, held throughout":     {with(running, func(o *observation) { o.check, o.suspended = statePending, true }), stepAdmit},
		"check set Retry by someone else":                 {with(running, func(o *observation) { o.check = stateRetry }), stepRelease},
		"check Rejected":                                  {with(running, func(o *observation) { o.check = stateRejected }), stepRelease},
		"the Workload finished":                           {with(running, func(o *observation) { o.workloadFinished = true }), stepRelease},
		"the Workload is gone":                            {with(running, func(o *observation) { o.workload = false }), stepRelease},
		"the Job is being deleted":                        {with(running, func(o *observation) { o.deleting = true }), stepRelease},
		"released, not recorded":                          {with(running, func(o *observation) { o.holding, o.released = nil, true }), stepRelease},
		"Released: the book's record is dropped":          {with(asking, func(o *observation) { o.guard, o.released = batchv1alpha1.GuardReleased, true }), stepDone},
		"Released, evicted and asked again":               {with(asking, func(o *observation) { o.guard = batchv1alpha1.GuardReleased }), stepAcquire},
		"deleted while waiting":                           {with(asking, func(o *observation) { o.deleting = true }), stepGiveUp},
		"deleted, our finalizer, nothing held":            {with(asking, func(o *observation) { o.deleting, o.hasFinalizer = true, true }), stepDropFinalizer},
		"Cluster scope refused":                           {with(asking, func(o *observation) { o.scopeAllowed = false }), stepScopeNotAllowed},
		"Cluster scope refused, already told":             {with(asking, func(o *observation) { o.scopeAllowed, o.guard = false, batchv1alpha1.GuardScopeNotAllowed }), stepIdle},
		"the Job ended while it waited":                   {with(asking, func(o *observation) { o.finished = true }), stepGiveUp},
		"admitted without our check: Unguarded":           {admittedWithout, stepUnguarded},
		"admitted without our check, not unsuspended yet": {with(admittedWithout, func(o *observation) { o.suspended = true }), stepUnguarded},
		"admitted without our check, already told":        {with(admittedWithout, func(o *observation) { o.guard = batchv1alpha1.GuardUnguarded }), stepIdle},
		"admitted without our check, ended before a pass": {with(admittedWithout, func(o *observation) { o.finished = true }), stepUnguarded},
		"admitted without our check, scope refused":       {with(admittedWithout, func(o *observation) { o.scopeAllowed = false }), stepUnguarded},
		"acquired, then admitted without our check":       {with(admittedWithout, func(o *observation) { o.holding = lock }), stepUnguarded},
		"Released, evicted, admitted again without our check": {
			with(admittedWithout, func(o *observation) { o.guard = batchv1alpha1.GuardReleased }), stepUnguarded},
		"Released at its end: it ran under the lock": {
			with(admittedWithout, func(o *observation) { o.guard, o.finished = batchv1alpha1.GuardReleased, true }), stepGiveUp},
		"quota reserved without our check, not admitted yet": {
			with(admittedWithout, func(o *observation) { o.admitted, o.suspended = false, true }), stepGiveUp},
		"Lost under policy Ignore, still admitted under our check": {
			with(admittedWithout, func(o *observation) { o.guard, o.check = batchv1alpha1.GuardLost, stateReady }), stepGiveUp},
		"held, and our check is no longer on the Workload": {with(running, func(o *observation) { o.admitted, o.check = true, "" }), stepRelease},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.obs); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}
