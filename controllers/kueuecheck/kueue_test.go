package kueuecheck

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
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
// checks; any other owner, or a Workload without checks, wakes nothing.
func TestJobOfWorkload(t *testing.T) {
	check := map[string]any{"name": "lock", "state": statePending}
	for name, tc := range map[string]struct {
		wl   *unstructured.Unstructured
		want int
	}{
		"a Job's, with a check":   {workload("batch/v1", "Job", check), 1},
		"a Job's, without checks": {workload("batch/v1", "Job"), 0},
		"a JobSet's":              {workload("jobset.x-k8s.io/v1alpha2", "JobSet", check), 0},
		"a Job of another group":  {workload("example.com/v1", "Job", check), 0},
	} {
		t.Run(name, func(t *testing.T) {
			reqs := jobOfWorkload(context.Background(), tc.wl)
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
