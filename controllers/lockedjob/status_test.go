package lockedjob

import (
	"context"
	"errors"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
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

// TestEveryWriterCutsItsMessage (#23): each writer that quotes a foreign cause of any length (the
// Job API, a kubelet, a failed Job, Redis) leaves status strings and Event notes the API server
// takes: one over its bound makes it refuse the whole status write, and the LockedJob never ends.
// controllers/lockedcronjob and controllers/lockview check their writers the same way.
func TestEveryWriterCutsItsMessage(t *testing.T) {
	ctx := context.Background()
	cause := errors.New(unit.LongCause)
	for name, write := range map[string]func(r *LockedJobReconciler, p *pass){
		"the Job API refuses the Job": func(r *LockedJobReconciler, p *pass) { r.failJobInvalid(p, cause) },
		"Redis fails":                 func(r *LockedJobReconciler, p *pass) { _ = r.redisDown(p, cause) },
		"the lock is lost": func(r *LockedJobReconciler, p *pass) {
			if err := r.loseLock(ctx, p, cause); err != nil {
				t.Fatal(err)
			}
		},
		"a pod is stuck": func(r *LockedJobReconciler, p *pass) {
			p.obs.stuck = "pod p container c: ErrImageNeverPull: " + unit.LongCause
			r.recordRunning(p)
		},
		"the Job failed": func(r *LockedJobReconciler, p *pass) {
			p.obs.released = true
			p.obs.job = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: unit.LongCause}}}}
			if _, err := r.finish(ctx, p); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := newUnitRig(t, interceptor.Funcs{})
			stored := u.get()
			p := &pass{lj: stored.DeepCopy(), before: stored, claim: u.r.claimOf(stored), obs: observation{hasFinalizer: true}}
			write(u.r, p)
			if _, err := u.r.record(ctx, p, nil); err != nil {
				t.Fatal(err)
			}
			got := u.get().Status
			unit.CheckCut(t, "status.message", got.Message)
			quoted := strings.HasSuffix(got.Message, reconcile.Ellipsis)
			for _, c := range got.Conditions {
				unit.CheckCut(t, "condition "+c.Type, c.Message)
				quoted = quoted || strings.HasSuffix(c.Message, reconcile.Ellipsis)
			}
			if !quoted {
				t.Errorf("no status string quotes the cause: %+v", got)
			}
			for _, note := range u.events.Notes() {
				unit.CheckCut(t, "Event note", note)
			}
		})
	}

}
