package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// TestFinishedSaysWhichEnd: Finished is False until the phase is terminal, then True with the reason
// of the condition that ended the LockedJob, on success and on every kind of failure.
func TestFinishedSaysWhichEnd(t *testing.T) {
	for _, tc := range []struct {
		phase      batchv1alpha1.LockedJobPhase
		ending     string // the terminal condition set before, if any
		endReason  string
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{batchv1alpha1.PhasePending, "", "", metav1.ConditionFalse, batchv1alpha1.ReasonInProgress},
		{batchv1alpha1.PhaseWaiting, "", "", metav1.ConditionFalse, batchv1alpha1.ReasonInProgress},
		{batchv1alpha1.PhaseRunning, "", "", metav1.ConditionFalse, batchv1alpha1.ReasonInProgress},
		{batchv1alpha1.PhaseSucceeded, batchv1alpha1.ConditionComplete, batchv1alpha1.ReasonJobComplete, metav1.ConditionTrue, batchv1alpha1.ReasonJobComplete},
		{batchv1alpha1.PhaseFailed, batchv1alpha1.ConditionFailed, batchv1alpha1.ReasonJobFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobFailed},
		{batchv1alpha1.PhaseFailed, batchv1alpha1.ConditionFailed, batchv1alpha1.ReasonLockTimeout, metav1.ConditionTrue, batchv1alpha1.ReasonLockTimeout},
		{batchv1alpha1.PhaseFailed, batchv1alpha1.ConditionFailed, batchv1alpha1.ReasonJobInvalid, metav1.ConditionTrue, batchv1alpha1.ReasonJobInvalid},
		{batchv1alpha1.PhaseLockLost, batchv1alpha1.ConditionLockLost, batchv1alpha1.ReasonLockLost, metav1.ConditionTrue, batchv1alpha1.ReasonLockLost},
		// An object whose ending condition is missing (written by an older version) still finishes.
		{batchv1alpha1.PhaseFailed, "", "", metav1.ConditionTrue, string(batchv1alpha1.PhaseFailed)},
	} {
		lj := &batchv1alpha1.LockedJob{}
		lj.Status.Phase = tc.phase
		lj.Status.Message = "told"
		if tc.ending != "" {
			setCondition(lj, tc.ending, metav1.ConditionTrue, tc.endReason, "ended")
		}
		setFinished(lj)
		got := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionFinished)
		if got == nil || got.Status != tc.wantStatus || got.Reason != tc.wantReason {
			t.Errorf("phase %s, %s/%s: Finished = %+v, want %s/%s", tc.phase, tc.ending, tc.endReason, got, tc.wantStatus, tc.wantReason)
		}
	}
}

// apiLimit is the API server's bound on status.message (the CRD's maxLength) and on an Event's
// note (events.k8s.io): what the cut must keep within, whatever reconcile.MaxMessage says.
const apiLimit = 1024

// longCause is a 5 kB cause of multi-byte text, as a Job API refusal or a kubelet may give.
var longCause = "ungültig: " + strings.Repeat("é", 2560)

// checkCut fails t when s is over the API's limit or not valid UTF-8.
func checkCut(t *testing.T, what, s string) {
	t.Helper()
	if len(s) > apiLimit || !utf8.ValidString(s) {
		t.Errorf("%s: %d bytes, valid UTF-8 %t: want at most %d bytes of valid UTF-8", what, len(s), utf8.ValidString(s), apiLimit)
	}
}

// TestEveryWriterCutsItsMessage (#23): each writer that quotes a foreign cause of any length (the
// Job API, a kubelet, a failed Job, Redis) leaves status strings and Event notes the API server
// takes: one over its bound makes it refuse the whole status write, and the LockedJob never ends.
func TestEveryWriterCutsItsMessage(t *testing.T) {
	ctx := context.Background()
	cause := errors.New(longCause)
	for name, write := range map[string]func(r *LockedJobReconciler, p *pass){
		"the Job API refuses the Job": func(r *LockedJobReconciler, p *pass) { r.failJobInvalid(p, cause) },
		"Redis fails":                 func(r *LockedJobReconciler, p *pass) { _ = r.redisDown(p, cause) },
		"the lock is lost": func(r *LockedJobReconciler, p *pass) {
			if err := r.loseLock(ctx, p, cause); err != nil {
				t.Fatal(err)
			}
		},
		"a pod is stuck": func(r *LockedJobReconciler, p *pass) {
			p.obs.stuck = "pod p container c: ErrImageNeverPull: " + longCause
			r.recordRunning(p)
		},
		"the Job failed": func(r *LockedJobReconciler, p *pass) {
			p.obs.released = true
			p.obs.job = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: longCause}}}}
			if _, err := r.finish(ctx, p); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := newUnitRig(t, interceptor.Funcs{})
			stored := u.get()
			p := &pass{lj: stored.DeepCopy(), before: stored, key: u.r.lockName(stored), obs: observation{hasFinalizer: true}}
			write(u.r, p)
			if _, err := u.r.record(ctx, p, nil); err != nil {
				t.Fatal(err)
			}
			got := u.get().Status
			checkCut(t, "status.message", got.Message)
			quoted := strings.HasSuffix(got.Message, reconcile.Ellipsis)
			for _, c := range got.Conditions {
				checkCut(t, "condition "+c.Type, c.Message)
				quoted = quoted || strings.HasSuffix(c.Message, reconcile.Ellipsis)
			}
			if !quoted {
				t.Errorf("no status string quotes the cause: %+v", got)
			}
			for _, note := range u.events.notes {
				checkCut(t, "Event note", note)
			}
		})
	}

	t.Run("a LockedCronJob's schedule is invalid", func(t *testing.T) {
		u := newCronUnitRig(t, time.Now())
		u.r.setScheduleValid(&cronPass{cj: u.cj, scheduleErr: longCause, scheduleReason: batchv1alpha1.ReasonInvalidSchedule})
		for _, c := range u.cj.Status.Conditions {
			checkCut(t, "condition "+c.Type, c.Message)
		}
		if len(u.events.notes) == 0 {
			t.Fatal("no Event told the invalid schedule")
		}
		for _, note := range u.events.notes {
			checkCut(t, "Event note", note)
		}
	})

	t.Run("a Lock view's Redis fails", func(t *testing.T) {
		r := &LockViewReconciler{Clock: clock.RealClock{}}
		var status batchv1alpha1.LockViewStatus
		r.setRedis(&status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, "Redis unavailable: "+longCause)
		for _, c := range status.Conditions {
			checkCut(t, "condition "+c.Type, c.Message)
		}
	})
}
