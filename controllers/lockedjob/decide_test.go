package lockedjob

import (
	"errors"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// TestDecide walks the state machine through every combination that matters. Each row names the
// hole it closes where one was reported (issue 9).
func TestDecide(t *testing.T) {
	lock := &lockbook.Lock{}
	lost := errors.New("lost")
	running := &batchv1.Job{}
	finished := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
	failed := &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}}
	now := metav1.Now()
	terminating := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}

	// base is a live LockedJob with its finalizer, allowed to acquire its lock, holding nothing.
	base := observation{hasFinalizer: true, scopeAllowed: true}
	with := func(mutate func(*observation)) observation {
		o := base
		mutate(&o)
		return o
	}

	cases := []struct {
		name string
		obs  observation
		want step
	}{
		// Creation and acquisition.
		{"new object: finalizer first", with(func(o *observation) { o.hasFinalizer = false }), stepAddFinalizer},
		{"not holding: acquire", base, stepAcquire},
		{"not holding, scope not allowed: wait for the user", with(func(o *observation) { o.scopeAllowed = false }), stepScopeNotAllowed},
		{"holding, no Job: create it", with(func(o *observation) { o.holding = lock }), stepCreateJob},
		{"holding, Job runs: running", with(func(o *observation) { o.holding, o.job, o.jobCreated = lock, running, true }), stepRunning},
		// #15: revoking Cluster scope stops acquisition only; a holder goes on.
		{"holding, scope revoked: still running", with(func(o *observation) {
			o.holding, o.job, o.jobCreated, o.scopeAllowed, o.lockRecorded = lock, running, true, false, true
		}), stepRunning},
		{"status says held, book empty, scope revoked: re-adopt", with(func(o *observation) {
			o.lockRecorded, o.scopeAllowed = true, false
		}), stepReadopt},

		// Restarts.
		{"status says held, book empty: re-adopt", with(func(o *observation) { o.lockRecorded = true }), stepReadopt},
		{"status says held, book empty, Job runs: re-adopt first", with(func(o *observation) {
			o.lockRecorded, o.job, o.jobCreated = true, running, true
		}), stepReadopt},

		// #11: a Job deleted out of band is never created again.
		{"Job created, now gone: JobGone, not create", with(func(o *observation) {
			o.holding, o.lockRecorded, o.jobCreated = lock, true, true
		}), stepJobGone},
		{"Job created, now gone, after a restart: re-adopt, then JobGone", with(func(o *observation) {
			o.lockRecorded, o.jobCreated = true, true
		}), stepReadopt},

		// Ending.
		{"Job completed: finish", with(func(o *observation) { o.holding, o.job, o.jobCreated = lock, finished, true }), stepFinish},
		{"Job failed: finish", with(func(o *observation) { o.holding, o.job, o.jobCreated = lock, failed, true }), stepFinish},
		// #25: after a restart the finish step releases by token; a lock that is not ours is LockLost.
		{"Job completed, book empty: finish (release decides)", with(func(o *observation) {
			o.lockRecorded, o.job, o.jobCreated = true, finished, true
		}), stepFinish},
		{"released, status write lost: record the same outcome again", with(func(o *observation) {
			o.released, o.lockRecorded, o.job, o.jobCreated = true, true, finished, true
		}), stepFinish},

		// Release at the pod's outcome (issue 27, part 6).
		{"the pod succeeded, the Job's condition to come: release now", with(func(o *observation) {
			o.holding, o.lockRecorded, o.job, o.jobCreated, o.settled = lock, true, running, true, true
		}), stepReleaseAtOutcome},
		{"the pod succeeded, book empty after a restart: release by token, not re-adopt", with(func(o *observation) {
			o.lockRecorded, o.job, o.jobCreated, o.settled = true, running, true, true
		}), stepReleaseAtOutcome},
		{"released at the outcome: wait for the condition, never acquire again", with(func(o *observation) {
			o.released, o.job, o.jobCreated = true, running, true
		}), stepAwaitOutcome},
		{"released at the outcome, the Job completed: record it", with(func(o *observation) {
			o.released, o.job, o.jobCreated = true, finished, true
		}), stepFinish},
		{"released at the outcome, the Job failed after all: record it", with(func(o *observation) {
			o.released, o.job, o.jobCreated = true, failed, true
		}), stepFinish},
		{"the pod succeeded, the lock was lost: lose", with(func(o *observation) {
			o.holding, o.lost, o.job, o.jobCreated, o.settled = lock, lost, running, true, true
		}), stepLoseLock},
		{"deleting after a release at the outcome: delete the Job, no re-adoption", with(func(o *observation) {
			o.deleting, o.released, o.job, o.jobCreated = true, true, running, true
		}), stepDeleteJob},

		// Losses (#13, #26, #28).
		{"lost while the Job runs: lose", with(func(o *observation) { o.lost, o.job, o.jobCreated = lost, running, true }), stepLoseLock},
		{"lost before the Job finished was seen: lose, not finish", with(func(o *observation) {
			o.lost, o.job, o.jobCreated = lost, finished, true
		}), stepLoseLock},
		{"lost, Job not found: lose (never create)", with(func(o *observation) { o.lost, o.lockRecorded = lost, true }), stepLoseLock},
		{"at risk, still holding: lose", with(func(o *observation) { o.lost, o.holding, o.job = lost, lock, running }), stepLoseLock},
		// #28: a stale pass after LockLost must not re-adopt.
		{"stale object after a loss: lose again, not re-adopt", with(func(o *observation) { o.lost, o.lockRecorded = lost, true }), stepLoseLock},

		// Terminal.
		{"terminal: forget the book's record", with(func(o *observation) { o.terminal = true }), stepForget},
		{"terminal and let go: nothing (the finalizer is not added again)", with(func(o *observation) {
			o.terminal, o.hasFinalizer = true, false
		}), stepIdle},
		{"terminal without the finalizer, yet holding: add it, then release", with(func(o *observation) {
			o.terminal, o.hasFinalizer, o.holding = true, false, lock
		}), stepAddFinalizer},
		{"terminal, lost and recorded: forget", with(func(o *observation) { o.terminal, o.lost = true, lost }), stepForget},
		{"terminal, lock still in hand: release after the pods", with(func(o *observation) { o.terminal, o.holding = true, lock }), stepReleaseAfterEnd},
		{"terminal, at risk, still in hand: release after the pods", with(func(o *observation) {
			o.terminal, o.holding, o.lost = true, lock, lost
		}), stepReleaseAfterEnd},
		{"terminal, status still says held: release", with(func(o *observation) { o.terminal, o.lockRecorded = true, true }), stepReleaseAfterEnd},
		{"terminal, released, status behind: forget", with(func(o *observation) {
			o.terminal, o.lockRecorded, o.released = true, true, true
		}), stepForget},

		// Deletion (#12, #17).
		{"deleting without our finalizer: nothing", with(func(o *observation) { o.deleting, o.hasFinalizer = true, false }), stepIdle},
		{"deleting a waiter: release by token and dequeue", with(func(o *observation) { o.deleting = true }), stepDeleteRelease},
		{"deleting, Job runs: delete it", with(func(o *observation) {
			o.deleting, o.holding, o.lockRecorded, o.job, o.jobCreated = true, lock, true, running, true
		}), stepDeleteJob},
		{"deleting, Job terminating: wait for pods, release", with(func(o *observation) {
			o.deleting, o.holding, o.lockRecorded, o.job, o.jobCreated = true, lock, true, terminating, true
		}), stepDeleteRelease},
		{"deleting, Job finished: release", with(func(o *observation) {
			o.deleting, o.holding, o.lockRecorded, o.job = true, lock, true, finished
		}), stepDeleteRelease},
		{"deleting after a restart: re-adopt before waiting for the pods", with(func(o *observation) {
			o.deleting, o.lockRecorded, o.job, o.jobCreated = true, true, running, true
		}), stepDeleteReadopt},
		{"deleting after a restart, re-adoption failed: go on", with(func(o *observation) {
			o.deleting, o.lockRecorded, o.lost, o.job = true, true, lost, running
		}), stepDeleteJob},
		{"deleting a finished LockedJob: no re-adoption", with(func(o *observation) {
			o.deleting, o.terminal, o.lockRecorded = true, true, true
		}), stepDeleteRelease},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.obs); got != tc.want {
				t.Errorf("decide(%+v) = %v, want %v", tc.obs, got, tc.want)
			}
		})
	}
}

// TestDecideNeverCreatesBesideAJob checks invariants over every combination of the flags: a Job is
// created only when none was created before and the lock is in hand and healthy; nothing is
// acquired or re-adopted while a lock is in hand, recorded, lost or released; a lock goes at the
// pod's outcome only when the pods settled and nothing else came first.
func TestDecideNeverCreatesBesideAJob(t *testing.T) {
	lock := &lockbook.Lock{}
	jobs := []*batchv1.Job{nil, {}, {Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}}
	for bits := range 1 << 10 {
		for _, job := range jobs {
			o := observation{
				deleting: bits&1 != 0, hasFinalizer: bits&2 != 0, terminal: bits&4 != 0,
				lockRecorded: bits&8 != 0, scopeAllowed: bits&16 != 0, released: bits&32 != 0,
				jobCreated: bits&64 != 0, job: job, settled: bits&512 != 0,
			}
			if bits&128 != 0 {
				o.holding = lock
			}
			if bits&256 != 0 {
				o.lost = errors.New("lost")
			}
			got := decide(o)
			desc := fmt.Sprintf("%+v → %v", o, got)
			if got == stepCreateJob && (o.jobCreated || o.job != nil || o.holding == nil || o.lost != nil || o.deleting || o.terminal) {
				t.Errorf("creates a Job it must not: %s", desc)
			}
			if got == stepAcquire && (o.holding != nil || o.lockRecorded || o.lost != nil || o.deleting || o.terminal || o.released) {
				t.Errorf("acquires when it must not: %s", desc)
			}
			if (got == stepReadopt || got == stepDeleteReadopt) && (o.lost != nil || o.terminal || o.holding != nil || o.released) {
				t.Errorf("re-adopts after a loss, the end or a release: %s", desc)
			}
			if got == stepReleaseAtOutcome && (!o.settled || o.lost != nil || o.terminal || o.deleting || o.released || o.job == nil) {
				t.Errorf("releases at the outcome when it must not: %s", desc)
			}
		}
	}
}

// TestMayHoldOrWait: deleting a finished LockedJob costs no Redis call unless a release failed.
func TestMayHoldOrWait(t *testing.T) {
	lock := &lockbook.Lock{}
	for _, tc := range []struct {
		name string
		obs  observation
		want bool
	}{
		{"not finished (a crash may have left a lock only the token names)", observation{}, true},
		{"finished and released", observation{terminal: true}, false},
		{"finished, release failed (status still says held)", observation{terminal: true, lockRecorded: true}, true},
		{"finished, lock still in hand", observation{terminal: true, holding: lock}, true},
		{"released at the pod's outcome, the Job's condition to come", observation{released: true}, false},
	} {
		if got := mayHoldOrWait(tc.obs); got != tc.want {
			t.Errorf("%s: mayHoldOrWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}
