package plugin

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Guarded Jobs (issue 22): plain Jobs labelled for a lock share its queue, fencing sequence and
// permits with the LockedJobs of the same lock; the plugin reads them from their annotations.

// guarded builds a guarded Job of lock "l" in namespace "ns", waiting as the admission gate
// created it (suspended, no fence), for the table tests.
func guarded(name string, mutate ...func(*batchv1.Job)) batchv1.Job {
	o := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), CreationTimestamp: metav1.NewTime(t0),
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: "l"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true)},
	}
	for _, m := range mutate {
		m(&o)
	}
	return o
}

func annotated(kv ...string) func(*batchv1.Job) {
	return func(o *batchv1.Job) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			o.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// held is what the operator's unsuspend write leaves: guard Held, the fence, unsuspended.
func held(fence int64) func(*batchv1.Job) {
	return func(o *batchv1.Job) {
		annotated(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardHeld), batchv1alpha1.AnnotationFencingToken, strconv.FormatInt(fence, 10))(o)
		o.Spec.Suspend = ptr.To(false)
	}
}

func jobCreated(d time.Duration) func(*batchv1.Job) {
	return func(o *batchv1.Job) { o.CreationTimestamp = metav1.NewTime(t0.Add(d)) }
}

func TestDeriveLocksWithGuardedJobs(t *testing.T) {
	const job = locks.KindJob
	cases := map[string]struct {
		ljs  []batchv1alpha1.LockedJob
		jobs []batchv1.Job
		want []LockView
	}{
		"a LockedJob holds it; guarded Jobs wait beside a LockedJob, and the first in queue order, a Job, is the head": {
			ljs: []batchv1alpha1.LockedJob{
				lj("h", holding(3, -time.Minute)),
				lj("w", waitingAt(2, "c/ns/h/x")),
			},
			jobs: []batchv1.Job{
				guarded("later", jobCreated(time.Minute)),
				guarded("urgent", annotated(batchv1alpha1.AnnotationGuardPriority, "5"), jobCreated(time.Hour)),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, Waiting: 3,
				InUse: 1, Holders: []Holder{{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))}},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "h", FencingToken: ptr.To[int64](3), AcquiredAt: at(t0.Add(-time.Minute))},
				Head:   &Ref{Kind: job, Namespace: "ns", Name: "urgent"}}},
		},
		"a guarded Job holds it (no acquiredAt: it records none); the LockedJob at position 1 is the head, though a Job sorts first": {
			ljs: []batchv1alpha1.LockedJob{lj("w", waitingAt(1, "c/ns/job:m/m-uid"), created(time.Minute))},
			jobs: []batchv1.Job{
				guarded("m", held(8)),
				guarded("early"),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, Waiting: 2,
				InUse: 1, Holders: []Holder{{Kind: job, Namespace: "ns", Name: "m", FencingToken: ptr.To[int64](8)}},
				Holder: &Holder{Kind: job, Namespace: "ns", Name: "m", FencingToken: ptr.To[int64](8)},
				Head:   &Ref{Kind: kindLockedJob, Namespace: "ns", Name: "w"}}},
		},
		"a semaphore held by both kinds, by slot; the higher fence of a slot two claim is the later holder, across kinds": {
			ljs: []batchv1alpha1.LockedJob{
				lj("a", holding(12, -time.Hour), inSlot(0)),
				lj("old", holding(5, -2*time.Hour), inSlot(1)),
			},
			jobs: []batchv1.Job{guarded("m", held(9), annotated(batchv1alpha1.AnnotationSlot, "1"))},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1, InUse: 2,
				Holders: []Holder{
					{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))},
					{Kind: job, Namespace: "ns", Name: "m", Slot: ptr.To[int32](1), FencingToken: ptr.To[int64](9)},
				},
				Holder: &Holder{Kind: kindLockedJob, Namespace: "ns", Name: "a", Slot: ptr.To[int32](0), FencingToken: ptr.To[int64](12), AcquiredAt: at(t0.Add(-time.Hour))}}},
		},
		"guarded Jobs that neither hold nor wait give the lock a row, and count for nothing; one that cannot be read is left out": {
			jobs: []batchv1.Job{
				guarded("released", annotated(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardReleased), batchv1alpha1.AnnotationFencingToken, "4")),
				guarded("lost", annotated(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardLost), batchv1alpha1.AnnotationFencingToken, "5")),
				guarded("unguarded", annotated(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardUnguarded)), func(o *batchv1.Job) { o.Spec.Suspend = nil }),
				guarded("refused", annotated(batchv1alpha1.AnnotationGuard, string(batchv1alpha1.GuardScopeNotAllowed))),
				guarded("running-unseen", func(o *batchv1.Job) { o.Spec.Suspend = ptr.To(false) }),
				guarded("bad", annotated(batchv1alpha1.AnnotationGuardPriority, "high"), func(o *batchv1.Job) { o.Labels[batchv1alpha1.LabelGuardLock] = "other" }),
			},
			want: []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "LockedJobs", Permits: 1}},
		},
		"a guarded Job of Cluster scope shares the lock with LockedJobs of other namespaces": {
			ljs:  []batchv1alpha1.LockedJob{lj("h", withClusterScope, holding(2, -time.Second), func(o *batchv1alpha1.LockedJob) { o.Namespace = "other" })},
			jobs: []batchv1.Job{guarded("m", annotated(batchv1alpha1.AnnotationGuardScope, "Cluster"))},
			want: []LockView{{Lock: "l", Scope: "Cluster", Source: "LockedJobs", Permits: 1, Waiting: 1, InUse: 1,
				Holders: []Holder{{Kind: kindLockedJob, Namespace: "other", Name: "h", FencingToken: ptr.To[int64](2), AcquiredAt: at(t0.Add(-time.Second))}},
				Holder:  &Holder{Kind: kindLockedJob, Namespace: "other", Name: "h", FencingToken: ptr.To[int64](2), AcquiredAt: at(t0.Add(-time.Second))},
				Head:    &Ref{Kind: job, Namespace: "ns", Name: "m"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, DeriveLocks(tc.ljs, tc.jobs)); diff != "" {
				t.Errorf("DeriveLocks (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestOverlayDeclaredNamesGuardedJobs(t *testing.T) {
	m := guarded("m", held(8))
	w := guarded("w", jobCreated(time.Minute))
	got := OverlayDeclared(DeriveLocks(nil, []batchv1.Job{m, w}), nil, []batchv1.Job{m, w}, []Declared{{Scope: "Namespace", Namespace: "ns", Name: "l",
		Status: batchv1alpha1.LockViewStatus{
			ObservedAt: at(t0), Waiting: ptr.To[int32](2), Head: "c/ns/job:w/w-uid",
			Holders: []batchv1alpha1.LockHolder{{Holder: "c/ns/job:m/m-uid", Job: "m", FencingToken: 8}},
		}}})
	want := []LockView{{Lock: "l", Scope: "Namespace", Namespace: "ns", Source: "Lock", Permits: 1, Waiting: 2, InUse: 1,
		Holders: []Holder{{Kind: locks.KindJob, Namespace: "ns", Name: "m", FencingToken: ptr.To[int64](8)}},
		Holder:  &Holder{Kind: locks.KindJob, Namespace: "ns", Name: "m", FencingToken: ptr.To[int64](8)},
		Head:    &Ref{Kind: locks.KindJob, Namespace: "ns", Name: "w"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OverlayDeclared (-want,+got):\n%s", diff)
	}
}

func TestParseWhyArg(t *testing.T) {
	for arg, want := range map[string]struct {
		kind locks.Kind
		name string
		err  bool
	}{
		"migrate":           {kind: locks.KindLockedJob, name: "migrate"},
		"lockedjob/migrate": {kind: locks.KindLockedJob, name: "migrate"},
		"lj/migrate":        {kind: locks.KindLockedJob, name: "migrate"},
		"job/migrate":       {kind: locks.KindJob, name: "migrate"},
		"Jobs/migrate":      {kind: locks.KindJob, name: "migrate"},
		"pod/migrate":       {err: true},
		"job/":              {err: true},
		"job/a/b":           {err: true},
	} {
		kind, name, err := parseWhyArg(arg)
		if (err != nil) != want.err || kind != want.kind || name != want.name {
			t.Errorf("parseWhyArg(%q) = %q, %q, %v; want %q, %q, error %v", arg, kind, name, err, want.kind, want.name, want.err)
		}
	}
}
