package lockview

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// TestViewOfWakesOnlyDeclaredLocks: a claimant's change (a LockedJob's or a guarded Job's) asks for
// a pass of its lock's view only when that Lock (or ClusterLock) exists, in the claimant's scope.
func TestViewOfWakesOnlyDeclaredLocks(t *testing.T) {
	declared := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "seen"}}
	shared := &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}
	cache := fake.NewClientBuilder().WithScheme(unit.Scheme(t)).WithObjects(declared, shared).Build()
	lj := func(lock string, scope batchv1alpha1.LockScope) *batchv1alpha1.LockedJob {
		return &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j"},
			Spec: batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: lock, Scope: scope}}}
	}
	job := func(lock string, annotations map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g",
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: lock}, Annotations: annotations}}
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
		{"a guarded Job of a declared Lock", len(ns(ctx, job("seen", nil))), 1},
		{"a guarded Job of an undeclared Lock", len(ns(ctx, job("unseen", nil))), 0},
		{"a guarded Job of a declared ClusterLock", len(cluster(ctx, job("shared", map[string]string{batchv1alpha1.AnnotationGuardScope: "Cluster"}))), 1},
		{"a guarded Job's Cluster scope is not the Lock's", len(ns(ctx, job("seen", map[string]string{batchv1alpha1.AnnotationGuardScope: "Cluster"}))), 0},
		{"a labelled Job whose lock cannot be read", len(ns(ctx, job("seen", map[string]string{batchv1alpha1.AnnotationGuardTTL: "soon"}))), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d requests, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// TestHandoffSeenBetweenTwoReads: the view names a handoff only when a holder left and another came
// between two reads; a holder of another cluster came when it was read.
func TestHandoffSeenBetweenTwoReads(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *metav1.Time { return &metav1.Time{Time: now.Add(time.Duration(s) * time.Second)} }
	a := batchv1alpha1.LockHolder{Holder: "c/ns/a/1", LockedJob: "a", AcquiredAt: at(-30)}
	b := batchv1alpha1.LockHolder{Holder: "c/ns/b/2", LockedJob: "b", AcquiredAt: at(-5), Slot: 1}
	c := batchv1alpha1.LockHolder{Holder: "c/ns/c/3", LockedJob: "c", AcquiredAt: at(-2)}
	remote := batchv1alpha1.LockHolder{Holder: "other/ns/r/4"}
	job := batchv1alpha1.LockHolder{Holder: "c/ns/job:a/5", Job: "a"}
	sharedJob := batchv1alpha1.LockHolder{Holder: "c/ns/job:m/6", Job: "ns/m"}
	for _, tc := range []struct {
		name        string
		before, now []batchv1alpha1.LockHolder
		want        *batchv1alpha1.LockHandoff
	}{
		{"unchanged", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{a}, nil},
		{"first holder: nobody left", nil, []batchv1alpha1.LockHolder{a}, nil},
		{"released: nobody came", []batchv1alpha1.LockHolder{a}, nil, nil},
		{"a to c", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{c}, &batchv1alpha1.LockHandoff{From: "a", To: "c", At: *at(-2)}},
		{"a semaphore: a left, b and c came, c the newest", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{b, c},
			&batchv1alpha1.LockHandoff{From: "a", To: "c", At: *at(-2)}},
		{"a semaphore: a and b left, c came to b's slot", []batchv1alpha1.LockHolder{a, b}, []batchv1alpha1.LockHolder{{Holder: c.Holder, LockedJob: "c", AcquiredAt: c.AcquiredAt, Slot: 1}},
			&batchv1alpha1.LockHandoff{From: "b", To: "c", At: *at(-2)}},
		{"a semaphore: a and b left, c came to a's slot", []batchv1alpha1.LockHolder{a, b}, []batchv1alpha1.LockHolder{c},
			&batchv1alpha1.LockHandoff{From: "a", To: "c", At: *at(-2)}},
		{"a semaphore: one came beside a staying holder, nobody left", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{a, b}, nil},
		{"to another cluster's holder", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{remote},
			&batchv1alpha1.LockHandoff{From: "a", To: "other/ns/r/4", At: metav1.Time{Time: now}}},
		{"a LockedJob to a guarded Job of the same name: the Job's kind in front", []batchv1alpha1.LockHolder{a}, []batchv1alpha1.LockHolder{job},
			&batchv1alpha1.LockHandoff{From: "a", To: "job/a", At: metav1.Time{Time: now}}},
		{"a ClusterLock's guarded Job to a LockedJob", []batchv1alpha1.LockHolder{sharedJob}, []batchv1alpha1.LockHolder{c},
			&batchv1alpha1.LockHandoff{From: "ns/job/m", To: "c", At: *at(-2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := handoff(tc.before, tc.now, now)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("handoff = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEveryWriterCutsItsMessage (#23): the view's writer that quotes a foreign cause of any length (Redis) leaves
// conditions the API server takes. controllers/lockedjob and controllers/lockedcronjob check theirs.
func TestEveryWriterCutsItsMessage(t *testing.T) {
	t.Run("a Lock view's Redis fails", func(t *testing.T) {
		r := &LockViewReconciler{Clock: clock.RealClock{}}
		var status batchv1alpha1.LockViewStatus
		r.setRedis(&status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, "Redis unavailable: "+unit.LongCause)
		for _, c := range status.Conditions {
			unit.CheckCut(t, "condition "+c.Type, c.Message)
		}
	})
}

// TestHolderNamesItsWorkload: a holder of this cluster is named by its LockedJob (with when it
// acquired, from its status) or its guarded Job (which records no acquisition time), in the Lock's
// namespace or, for a ClusterLock, as namespace/name; anything else only by its holder name.
func TestHolderNamesItsWorkload(t *testing.T) {
	acquired := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run"},
		Status: batchv1alpha1.LockedJobStatus{Holder: "c/ns/run/1234", AcquiredAt: &acquired}}
	guarded := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "migrate", Labels: map[string]string{batchv1alpha1.LabelGuardLock: "l"}}}
	r := &LockViewReconciler{Client: fake.NewClientBuilder().WithScheme(unit.Scheme(t)).WithObjects(lj, guarded).Build(),
		Identity: locks.Identity{ClusterID: "c"}}
	for _, tc := range []struct {
		name, holder, namespace string
		want                    batchv1alpha1.LockHolder
	}{
		{"a LockedJob of the Lock's namespace", "c/ns/run/1234", "ns",
			batchv1alpha1.LockHolder{Holder: "c/ns/run/1234", LockedJob: "run", AcquiredAt: &acquired}},
		{"a guarded Job of the Lock's namespace", "c/ns/job:migrate/abcd", "ns",
			batchv1alpha1.LockHolder{Holder: "c/ns/job:migrate/abcd", Job: "migrate"}},
		{"a guarded Job holding a ClusterLock", "c/ns/job:migrate/abcd", "",
			batchv1alpha1.LockHolder{Holder: "c/ns/job:migrate/abcd", Job: "ns/migrate"}},
		{"a guarded Job of another namespace cannot hold a Namespace-scope key", "c/other/job:migrate/abcd", "ns",
			batchv1alpha1.LockHolder{Holder: "c/other/job:migrate/abcd"}},
		{"another cluster's guarded Job", "far/ns/job:migrate/abcd", "ns",
			batchv1alpha1.LockHolder{Holder: "far/ns/job:migrate/abcd"}},
		{"a kind the view does not name", "c/ns/pod:p/abcd", "ns",
			batchv1alpha1.LockHolder{Holder: "c/ns/pod:p/abcd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.FencingToken, tc.want.Slot = 9, 1
			got := r.holder(context.Background(), tc.holder, 9, 1, tc.namespace)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("holder = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWriteBudget: after a quiet time a lock's view writes a change at once, WriteBurst times in a
// row; a longer burst waits one MinInterval per write, and a quiet time earns the writes back.
func TestWriteBudget(t *testing.T) {
	fc := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	r := &LockViewReconciler{Clock: fc, Timing: Timing{MinInterval: time.Second, WriteBurst: 3},
		written: map[types.NamespacedName]writeBudget{}}
	id := types.NamespacedName{Namespace: "ns", Name: "l"}
	write := func() time.Duration {
		t.Helper()
		wait := r.writeWait(id)
		if wait == 0 {
			r.wrote(id)
		}
		return wait
	}
	for i := range 3 {
		if wait := write(); wait != 0 {
			t.Fatalf("write %d of a burst after a quiet time waits %v", i+1, wait)
		}
	}
	if wait := write(); wait != time.Second {
		t.Fatalf("the fourth write at once waits %v, want 1s", wait)
	}
	fc.SetTime(fc.Now().Add(400 * time.Millisecond))
	if wait := write(); wait != 600*time.Millisecond {
		t.Fatalf("0.4 s later it waits %v, want 0.6s", wait)
	}
	fc.SetTime(fc.Now().Add(600 * time.Millisecond))
	if wait := write(); wait != 0 {
		t.Fatalf("one interval after the burst a write waits %v", wait)
	}
	fc.SetTime(fc.Now().Add(time.Minute)) // a quiet time: the whole burst is back, no more
	for i := range 3 {
		if wait := write(); wait != 0 {
			t.Fatalf("write %d after a quiet minute waits %v", i+1, wait)
		}
	}
	if wait := write(); wait == 0 {
		t.Fatal("a quiet time earned more than WriteBurst writes")
	}
}
