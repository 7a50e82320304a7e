package locks

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

func TestScopeGate(t *testing.T) {
	lj := func(ns string, scope batchv1alpha1.LockScope) *batchv1alpha1.LockedJob {
		l := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x", UID: "uid-x"}}
		l.Spec.Lock.Scope = scope
		return l
	}
	for name, tc := range map[string]struct {
		gate ScopeGate
		lj   *batchv1alpha1.LockedJob
		want bool
	}{
		"Namespace scope, allowed nowhere else":           {nil, lj("a", batchv1alpha1.LockScopeNamespace), true},
		"no scope (stored before the default): Namespace": {nil, lj("a", ""), true},
		"Cluster scope, nobody trusted":                   {nil, lj("a", batchv1alpha1.LockScopeCluster), false},
		"Cluster scope, another namespace trusted":        {ScopeGate{"b"}, lj("a", batchv1alpha1.LockScopeCluster), false},
		"Cluster scope, this namespace trusted":           {ScopeGate{"b", "a"}, lj("a", batchv1alpha1.LockScopeCluster), true},
		"Cluster scope, every namespace trusted":          {ScopeGate{"*"}, lj("a", batchv1alpha1.LockScopeCluster), true},
	} {
		if got := tc.gate.Allows(ClaimantOf(tc.lj)); got != tc.want {
			t.Errorf("%s: Allows = %v, want %v", name, got, tc.want)
		}
	}
}
