package deploy_test

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestGuardBindingsFollowTheirPolicies: config/guard included by a kustomization that renames
// what it includes (config/default's namePrefix and namespace, and a suffix) still binds each
// policy: every binding's spec.policyName names the renamed policy of its kind. Without
// config/guard/kustomizeconfig.yaml, kustomize v5.8.1 renames the ValidatingAdmissionPolicy's
// reference but not the MutatingAdmissionPolicy's, and that binding binds nothing.
func TestGuardBindingsFollowTheirPolicies(t *testing.T) {
	tl := newTools(t)
	for name, rename := range map[string]string{
		"alone":                   "",
		"config/default's prefix": "namePrefix: lockedjob-\nnamespace: " + operatorNS + "\n",
		"a prefix and a suffix":   "namePrefix: a-\nnameSuffix: -z\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			guard, err := filepath.Rel(dir, filepath.Join(tl.root, "config", "guard"))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "kustomization.yaml"), rename+"resources:\n- "+guard+"\n")
			objs := tl.kustomizeBuild(t, dir)
			policies := map[string]string{} // kind -> name
			for _, o := range objs {
				if !strings.HasSuffix(o.GetKind(), "Binding") {
					policies[o.GetKind()] = o.GetName()
				}
			}
			bindings := 0
			for _, o := range objs {
				kind, ok := strings.CutSuffix(o.GetKind(), "Binding")
				if !ok {
					continue
				}
				bindings++
				got, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
				if want := policies[kind]; want == "" || got != want {
					t.Errorf("%s %s: spec.policyName = %q, want the %s's name %q", o.GetKind(), o.GetName(), got, kind, want)
				}
			}
			if bindings != 2 || len(policies) != 2 {
				t.Fatalf("config/guard built %d policies and %d bindings, want 2 and 2: %v", len(policies), bindings, policies)
			}
		})
	}
}
