package plugin

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

func TestOverlayDeclared(t *testing.T) {
	observed := at(t0)
	held := lj("h", holding(3, -time.Minute))
	waiter := lj("w", waitingAt(1, "c/ns/h/x"), func(o *batchv1alpha1.LockedJob) { o.UID = "abcdef12-3456" })
	cases := map[string]struct {
		ljs      []batchv1alpha1.LockedJob
		declared []Declared
		want     []LockView
	}{
		"declared, not yet read from Redis: the LockedJobs' view stays": {
			ljs:      []batchv1alpha1.LockedJob{held},
			declared: []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l"}},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}}},
		},
		"Redis names another cluster's holder and more waiters; the head is a LockedJob in view": {
			ljs: []batchv1alpha1.LockedJob{waiter},
			declared: []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l", Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, Holders: []batchv1alpha1.LockHolder{{Holder: "far/ns/r/99", FencingToken: 40}},
				Waiting: ptr.To[int32](3), Head: "near/ns/w/abcdef12",
			}}},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, Waiting: 3,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Identity: "far/ns/r/99", FencingToken: ptr.To[int64](40)}},
				Holder: &Holder{Kind: kindLockedJob, Identity: "far/ns/r/99", FencingToken: ptr.To[int64](40)},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"}}},
		},
		"the holder is the LockedJob in view: its acquiredAt fills in; Redis has no queue count (Redlock)": {
			ljs: []batchv1alpha1.LockedJob{held, waiter},
			declared: []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l", Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, Holders: []batchv1alpha1.LockHolder{{Holder: "c/ns/h/x", LockedJob: "h", FencingToken: 4}},
			}}},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, Waiting: 1,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](4), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](4), AcquiredAt: at(t0.Add(-time.Minute))},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"}}},
		},
		"Redis says nobody holds it, whatever a stale status says; the head is another cluster's": {
			ljs: []batchv1alpha1.LockedJob{held},
			declared: []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l", Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, Waiting: ptr.To[int32](1), Head: "far/ns/q/12345678",
			}}},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, Waiting: 1,
				Head: &Ref{Kind: kindLockedJob, Identity: "far/ns/q/12345678"}}},
		},
		"a Lock written before a LockedJob of the lock last changed is stale: the LockedJobs' view stays": {
			ljs: []batchv1alpha1.LockedJob{lj("done", func(o *batchv1alpha1.LockedJob) {
				o.Status.Phase, o.Status.ReleasedAt = batchv1alpha1.PhaseSucceeded, at(t0.Add(time.Second))
			})},
			declared: []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l", Status: batchv1alpha1.LockViewStatus{
				ObservedAt: at(t0.Add(time.Second)), Holders: []batchv1alpha1.LockHolder{{Holder: "c/ns/done/x", LockedJob: "done", FencingToken: 4}},
			}}},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1}},
		},
		"a declared ClusterLock no LockedJob in view uses gets its own row": {
			declared: []Declared{{Scope: "Cluster", Name: "shared", Status: batchv1alpha1.LockViewStatus{
				ObservedAt: observed, Holders: []batchv1alpha1.LockHolder{{Holder: "c/other/x/1", LockedJob: "other/x", FencingToken: 7}},
				Waiting: ptr.To[int32](0),
			}}},
			want: []LockView{{Lock: "shared", Scope: "Cluster", Source: "ClusterLock", Permits: 1,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "other", Name: "x", FencingToken: ptr.To[int64](7)}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "other", Name: "x", FencingToken: ptr.To[int64](7)}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := OverlayDeclared(DeriveLocks(tc.ljs, nil), tc.ljs, nil, tc.declared)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("OverlayDeclared (-want,+got):\n%s", diff)
			}
		})
	}
}
