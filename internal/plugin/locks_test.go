package plugin

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// lj builds a LockedJob of lock "l" in namespace "ns" for the table tests.
func lj(name string, mutate ...func(*batchv1alpha1.LockedJob)) batchv1alpha1.LockedJob {
	o := batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), CreationTimestamp: metav1.NewTime(t0)},
		Spec:       batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: "l", Scope: batchv1alpha1.LockScopeNamespace}},
	}
	for _, m := range mutate {
		m(&o)
	}
	return o
}

func priority(p int32) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) { o.Spec.Lock.Priority = p }
}

func created(d time.Duration) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) { o.CreationTimestamp = metav1.NewTime(t0.Add(d)) }
}

func holding(fence int64, acquired time.Duration) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) {
		o.Status.Phase, o.Status.FencingToken, o.Status.AcquiredAt = batchv1alpha1.PhaseRunning, ptr.To(fence), at(t0.Add(acquired))
		o.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.ConditionLockAcquired, Status: metav1.ConditionTrue}}
	}
}

func waitingAt(position int32, blockedBy string) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) {
		o.Status.Phase, o.Status.BlockedBy = batchv1alpha1.PhaseWaiting, blockedBy
		if position > 0 {
			o.Status.QueuePosition = ptr.To(position)
		}
	}
}

// ran sets the times of an acquisition: waiting since, acquired at and, unless zero, released at.
func ran(waitingSince, acquired, released time.Duration) func(*batchv1alpha1.LockedJob) {
	return func(o *batchv1alpha1.LockedJob) {
		o.Status.WaitingSince, o.Status.AcquiredAt = at(t0.Add(waitingSince)), at(t0.Add(acquired))
		if released != 0 {
			o.Status.ReleasedAt = at(t0.Add(released))
		}
	}
}

func TestDeriveLocks(t *testing.T) {
	cases := map[string]struct {
		ljs  []batchv1alpha1.LockedJob
		want []LockView
	}{
		"a holder, two waiters: the head is the one at position 1, not the first in queue order": {
			ljs: []batchv1alpha1.LockedJob{
				lj("h", holding(3, -time.Minute)),
				lj("w1", waitingAt(2, "c/ns/h/x"), priority(9)),
				lj("w2", waitingAt(1, "c/ns/h/x")),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, Waiting: 2,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w2"}}},
		},
		"two say they hold it for a moment: the higher fence is the later holder": {
			ljs: []batchv1alpha1.LockedJob{lj("before", holding(4, -time.Hour)), lj("after", holding(5, -time.Second))},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "after", FencingToken: ptr.To[int64](5), AcquiredAt: at(t0.Add(-time.Second))}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "after", FencingToken: ptr.To[int64](5), AcquiredAt: at(t0.Add(-time.Second))}}},
		},
		"no LockedJob in view holds it: the holder the waiters read from Redis, the first in line's view": {
			ljs: []batchv1alpha1.LockedJob{
				lj("late", waitingAt(2, "other/ns/x/stale"), created(time.Minute)),
				lj("early", waitingAt(1, "other/ns/x/1234")),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, Waiting: 2,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Identity: "other/ns/x/1234"}},
				Holder: &Holder{Kind: kindLockedJob, Identity: "other/ns/x/1234"}, Head: &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "early"}}},
		},
		"same lock name in two namespaces, and Cluster scope: three locks": {
			ljs: []batchv1alpha1.LockedJob{
				lj("a"),
				lj("b", func(o *batchv1alpha1.LockedJob) { o.Namespace = "other" }),
				lj("c", withClusterScope),
				lj("d", withClusterScope, func(o *batchv1alpha1.LockedJob) { o.Namespace = "other" }),
			},
			want: []LockView{
				{Lock: "l", Scope: "Cluster", Source: "LockedJobs", Permits: 1},
				{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1},
				{Lock: "l", Scope: "Namespace", Namespace: "other", Source: "LockedJobs", Permits: 1},
			},
		},
		"the last handoff: the latest acquisition by one that waited through the previous release": {
			ljs: []batchv1alpha1.LockedJob{
				lj("first", ran(-10*time.Minute, -10*time.Minute, -6*time.Minute)),
				lj("second", ran(-9*time.Minute, -6*time.Minute, -2*time.Minute)),
				lj("third", ran(-5*time.Minute, -2*time.Minute, 0)),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, LastHandoff: &Handoff{
				From: Ref{Kind: kindLockedJob, Namespace: "ns", Name: "second"}, To: Ref{Kind: kindLockedJob, Namespace: "ns", Name: "third"},
				ReleasedAt: metav1.NewTime(t0.Add(-2 * time.Minute)), AcquiredAt: metav1.NewTime(t0.Add(-2 * time.Minute)),
			}}},
		},
		"no handoff: the next one came after the release, or after a lost lock (no releasedAt)": {
			ljs: []batchv1alpha1.LockedJob{
				lj("released", ran(-10*time.Minute, -10*time.Minute, -6*time.Minute)),
				lj("came-later", ran(-5*time.Minute, -5*time.Minute, -270*time.Second)),
				lj("lost", ran(-4*time.Minute, -4*time.Minute, 0)),
				lj("after-loss", ran(-3*time.Minute, -time.Minute, 0)),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, DeriveLocks(tc.ljs, nil)); diff != "" {
				t.Errorf("DeriveLocks (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestPlaceOf(t *testing.T) {
	cases := map[string]struct {
		status batchv1alpha1.LockedJobStatus
		want   *Place
	}{
		"exact":         {batchv1alpha1.LockedJobStatus{QueuePosition: ptr.To[int32](2), Message: "Waiting for lock l held by h (position 2 in queue)"}, &Place{Exact: 2}},
		"bucket":        {batchv1alpha1.LockedJobStatus{Message: "Waiting for lock l: waiters ahead (position >20 in queue)"}, &Place{MoreThan: 20}},
		"not yet known": {batchv1alpha1.LockedJobStatus{Message: "Waiting for lock l held by  (in queue)"}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := lj("x")
			o.Status = tc.status
			if diff := cmp.Diff(tc.want, placeOf(&o)); diff != "" {
				t.Errorf("placeOf (-want,+got):\n%s", diff)
			}
		})
	}
}
