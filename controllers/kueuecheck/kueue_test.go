package kueuecheck

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// workload is a Workload in namespace ns controlled by the object x of apiVersion and kind, with
// the admission check states checks.
func workload(apiVersion, kind string, checks ...map[string]any) *unstructured.Unstructured {
	wl := newObject(KindWorkload)
	wl.SetNamespace("ns")
	wl.SetName("job-x-1234")
	wl.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "x", UID: "u", Controller: ptr.To(true)}})
	states := make([]any, 0, len(checks))
	for _, c := range checks {
		states = append(states, c)
	}
	_ = unstructured.SetNestedSlice(wl.Object, states, "status", "admissionChecks")
	return wl
}

// TestJobOfWorkload: a Workload wakes the batch/v1 Job that controls it, once it has admission
// checks; a Workload without checks only once it is admitted and the cache of labelled Jobs has its
// Job as a locked Kueue Job (to be marked Unguarded); any other owner wakes nothing.
func TestJobOfWorkload(t *testing.T) {
	check := map[string]any{"name": "lock", "state": statePending}
	admitted := func(wl *unstructured.Unstructured) *unstructured.Unstructured {
		_ = unstructured.SetNestedSlice(wl.Object, []any{map[string]any{
			"type": conditionAdmitted, "status": "True", "reason": "Admitted", "message": "",
			"lastTransitionTime": "2026-01-01T00:00:00Z",
		}}, "status", "conditions")
		return wl
	}
	job := func(uid types.UID, labels map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", UID: uid, Labels: labels}}
	}
	locked := map[string]string{batchv1alpha1.LabelGuardLock: "db", locks.LabelKueueQueue: "q"}
	for name, tc := range map[string]struct {
		wl     *unstructured.Unstructured
		cached *batchv1.Job
		want   int
	}{
		"a Job's, with a check":                                 {workload("batch/v1", "Job", check), nil, 1},
		"a Job's, without checks":                               {workload("batch/v1", "Job"), job("u", locked), 0},
		"a JobSet's":                                            {workload("jobset.x-k8s.io/v1alpha2", "JobSet", check), nil, 0},
		"a Job of another group":                                {workload("example.com/v1", "Job", check), nil, 0},
		"admitted without checks, a locked Kueue Job":           {admitted(workload("batch/v1", "Job")), job("u", locked), 1},
		"admitted without checks, the Job not cached":           {admitted(workload("batch/v1", "Job")), nil, 0},
		"admitted without checks, a Job without the lock label": {admitted(workload("batch/v1", "Job")), job("u", map[string]string{locks.LabelKueueQueue: "q"}), 0},
		"admitted without checks, another Job of the same name": {admitted(workload("batch/v1", "Job")), job("other", locked), 0},
	} {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			if tc.cached != nil {
				b = b.WithObjects(tc.cached)
			}
			reqs := jobOfWorkload(b.Build())(context.Background(), tc.wl)
			if len(reqs) != tc.want {
				t.Fatalf("jobOfWorkload = %v, want %d requests", reqs, tc.want)
			}
			if tc.want == 1 && (reqs[0].Namespace != "ns" || reqs[0].Name != "x") {
				t.Fatalf("jobOfWorkload = %v, want ns/x", reqs)
			}
		})
	}
}

// TestStateOf: the state of a named check, "" for a check the Workload does not have.
func TestStateOf(t *testing.T) {
	wl := workload("batch/v1", "Job", map[string]any{"name": "other", "state": stateReady}, map[string]any{"name": "lock", "state": stateRetry})
	if got := stateOf(wl, "lock"); got != stateRetry {
		t.Errorf("stateOf(lock) = %q, want %q", got, stateRetry)
	}
	if got := stateOf(wl, "missing"); got != "" {
		t.Errorf("stateOf(missing) = %q, want \"\"", got)
	}
	if got := stateOf(wl, ""); got != "" {
		t.Errorf("stateOf(\"\") = %q, want \"\"", got)
	}
}
