package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestViewOfWakesOnlyDeclaredLocks: a LockedJob's change asks for a pass of its lock's view only
// when that Lock (or ClusterLock) exists, in the LockedJob's scope.
func TestViewOfWakesOnlyDeclaredLocks(t *testing.T) {
	declared := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "seen"}}
	shared := &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}
	cache := fake.NewClientBuilder().WithScheme(testSchemeForUnit(t)).WithObjects(declared, shared).Build()
	lj := func(lock string, scope batchv1alpha1.LockScope) *batchv1alpha1.LockedJob {
		return &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"},
			Spec: batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: lock, Scope: scope}}}
	}
	ns, cluster := viewOf(cache, batchv1alpha1.LockScopeNamespace), viewOf(cache, batchv1alpha1.LockScopeCluster)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		got  int
		want int
	}{
		{"declared Lock", len(ns(ctx, lj("seen", ""))), 1},
		{"undeclared Lock", len(ns(ctx, lj("unseen", batchv1alpha1.LockScopeNamespace))), 0},
		{"Cluster scope is not the Lock's", len(ns(ctx, lj("seen", batchv1alpha1.LockScopeCluster))), 0},
		{"declared ClusterLock", len(cluster(ctx, lj("shared", batchv1alpha1.LockScopeCluster))), 1},
		{"undeclared ClusterLock", len(cluster(ctx, lj("other", batchv1alpha1.LockScopeCluster))), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d requests, want %d", tc.name, tc.got, tc.want)
		}
	}
}
