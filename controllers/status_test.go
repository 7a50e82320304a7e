package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
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
