package testkit

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockedjob/lockedjob/test/utils"
)

// TestGuardPoliciesAreTheGate: what every suite installs is every policy of config/guard and
// their bindings, as kustomize builds them.
func TestGuardPoliciesAreTheGate(t *testing.T) {
	root, err := utils.ProjectDir()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := GuardPolicies(root)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetAPIVersion()+" "+o.GetKind())
	}
	slices.Sort(kinds)
	// For guarded Jobs and for guarded Pods: a mutating and a validating policy; for Jobs and
	// CronJobs labelled in the wrong place, a validating policy; each with its binding.
	want := []string{
		"admissionregistration.k8s.io/v1 MutatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 MutatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding",
		"admissionregistration.k8s.io/v1 MutatingAdmissionPolicyBinding",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding",
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("config/guard builds (-want,+got):\n%s", diff)
	}
}
