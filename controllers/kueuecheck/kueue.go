package kueuecheck

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kueue's objects as this package reads and writes them: unstructured, since Kueue's module pins
// other Kubernetes versions than ours (test/kueue runs the real thing against these fields).

// ControllerName is the spec.controllerName of the AdmissionChecks lockedjob answers for.
const ControllerName = "batch.lockedjob.dev/lock"

// GroupVersion is the Kueue API spoken here, the storage version of Kueue v0.17.
var GroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// The kinds read, and the states of an admission check (Kueue's CheckState).
const (
	KindWorkload       = "Workload"
	KindAdmissionCheck = "AdmissionCheck"

	statePending  = "Pending"
	stateReady    = "Ready"
	stateRetry    = "Retry"
	stateRejected = "Rejected"

	conditionActive        = "Active"
	conditionQuotaReserved = "QuotaReserved"
	conditionAdmitted      = "Admitted"
	conditionFinished      = "Finished"
)

// newObject is an empty Kueue object of kind.
func newObject(kind string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(GroupVersion.WithKind(kind))
	return o
}

// newList is an empty list of Kueue's kind.
func newList(kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(GroupVersion.WithKind(kind + "List"))
	return l
}

// conditions are the status conditions of o; those that do not parse are left out.
func conditions(o *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	out := make([]metav1.Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := metav1.Condition{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// conditionTrue reports whether o's condition typ is True.
func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	return meta.IsStatusConditionTrue(conditions(o), typ)
}

// checkStates are status.admissionChecks of a Workload, as written (Kueue's AdmissionCheckState
// list, keyed by name).
func checkStates(wl *unstructured.Unstructured) []map[string]any {
	raw, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	out := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// clusterQueueOf is the ClusterQueue that admitted, or reserved quota for, a Workload; "" if none.
func clusterQueueOf(wl *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue")
	return name
}

// podSetNames are the names of a Workload's spec.podSets.
func podSetNames(wl *unstructured.Unstructured) []string {
	raw, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podSets")
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok {
			if name, ok := m["name"].(string); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

// controllerJobOf is the name and UID of the batch/v1 Job that controls o, if one does.
func controllerJobOf(o metav1.Object) (*metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "Job" {
		return nil, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != "batch" {
		return nil, false
	}
	return ref, true
}
