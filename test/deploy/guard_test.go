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
			policies := map[string]map[string]bool{} // kind -> names
			for _, o := range objs {
				if !strings.HasSuffix(o.GetKind(), "Binding") {
					if policies[o.GetKind()] == nil {
						policies[o.GetKind()] = map[string]bool{}
					}
					policies[o.GetKind()][o.GetName()] = true
				}
			}
			bound := map[string]bool{} // kind/name of each policy a binding names
			for _, o := range objs {
				kind, ok := strings.CutSuffix(o.GetKind(), "Binding")
				if !ok {
					continue
				}
				got, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
				if !policies[kind][got] {
					t.Errorf("%s %s: spec.policyName = %q, which names no %s of the build (%v)", o.GetKind(), o.GetName(), got, kind, policies[kind])
				}
				bound[kind+"/"+got] = true
			}
			// Two policies of each kind for guarded Jobs and guarded Pods, and the validating one of
			// misplaced labels: each bound once.
			if len(bound) != 5 || len(policies["MutatingAdmissionPolicy"]) != 2 || len(policies["ValidatingAdmissionPolicy"]) != 3 {
				t.Fatalf("config/guard built policies %v and bound %v, want two mutating and three validating, each bound", policies, bound)
			}
		})
	}
}
