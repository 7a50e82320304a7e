package lockedcronjob

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// cronUnitRig is the LockedCronJob reconciler over a fake API server whose List of LockedJobs
// answers as a cache that has not seen them yet, on a fake clock.
type cronUnitRig struct {
	t      *testing.T
	api    client.WithWatch
	r      *LockedCronJobReconciler
	events *unit.Events
	cj     *batchv1alpha1.LockedCronJob
}

func newCronUnitRig(t *testing.T, now time.Time, objs ...client.Object) *cronUnitRig {
	t.Helper()
	cj := &batchv1alpha1.LockedCronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nightly", UID: "uid-cron", Generation: 1,
			CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Second))},
		Spec: batchv1alpha1.LockedCronJobSpec{Schedule: "* * * * *",
			LockedJobTemplate: batchv1alpha1.LockedJobTemplate{Spec: unit.LockedJob("", "").Spec}},
	}
	api := fake.NewClientBuilder().WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedCronJob{}).WithObjects(append(objs, cj)...).Build()
	staleList := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*batchv1alpha1.LockedJobList); ok {
			return nil // the cache has not seen the LockedJobs yet
		}
		return c.List(ctx, list, opts...)
	}}
	events := &unit.Events{}
	r := &LockedCronJobReconciler{Client: interceptor.NewClient(api, staleList), Scheme: api.Scheme(), Recorder: events,
		Identity: locks.Identity{ClusterID: "c"}, Clock: clocktesting.NewFakePassiveClock(now), RedisTimeout: time.Second}
	return &cronUnitRig{t: t, api: api, r: r, events: events, cj: cj}
}

func (u *cronUnitRig) reconcile() (ctrl.Result, error) {
	return u.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(u.cj)})
}

func (u *cronUnitRig) status() batchv1alpha1.LockedCronJobStatus {
	u.t.Helper()
	got := &batchv1alpha1.LockedCronJob{}
	if err := u.api.Get(context.Background(), client.ObjectKeyFromObject(u.cj), got); err != nil {
		u.t.Fatal(err)
	}
	return got.Status
}

// TestCronRunCreatedOnceWhenTheCacheLags: a pass that lost its status write, followed by one whose
// cache does not show the run's LockedJob yet, finds it by name (AlreadyExists) and records the
// run: one LockedJob, one Created Event, and the requeue lands on the next scheduled time.
func TestCronRunCreatedOnceWhenTheCacheLags(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 20, 0, time.UTC)
	run := now.Truncate(time.Minute)
	u := newCronUnitRig(t, now)
	existing, err := u.r.lockedJobFor(u.cj, run)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.api.Create(context.Background(), existing); err != nil {
		t.Fatal(err)
	}

	res, err := u.reconcile()
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if want := 40 * time.Second; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v (the next scheduled time)", res.RequeueAfter, want)
	}
	var list batchv1alpha1.LockedJobList
	if err := u.api.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d LockedJobs, want 1", len(list.Items))
	}
	st := u.status()
	if st.LastScheduleTime == nil || !st.LastScheduleTime.Equal(&metav1.Time{Time: run}) {
		t.Errorf("lastScheduleTime = %v, want %v", st.LastScheduleTime, run)
	}
	if n := u.events.Count(batchv1alpha1.ReasonRunCreated); n != 0 {
		t.Errorf("%d Created Events from the pass that found the run, want 0 (the creating pass told it)", n)
	}
}

// TestCronNeverAdoptsALockedJobItDoesNotOwn: a LockedJob of the run's name that another owner made
// is an error, not the run.
func TestCronNeverAdoptsALockedJobItDoesNotOwn(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 20, 0, time.UTC)
	squatter := unit.LockedJob(RunName("nightly", now.Truncate(time.Minute)), "uid-squatter")
	u := newCronUnitRig(t, now, squatter)
	if _, err := u.reconcile(); err == nil {
		t.Fatal("reconcile succeeded; want an error naming the taken name")
	}
	if st := u.status(); st.LastScheduleTime != nil {
		t.Errorf("lastScheduleTime = %v, want none", st.LastScheduleTime)
	}
	got := &batchv1alpha1.LockedJob{}
	if err := u.api.Get(context.Background(), client.ObjectKeyFromObject(squatter), got); err != nil {
		t.Fatal(err)
	}
	if owned := controllerutil.HasControllerReference(got); owned {
		t.Error("the squatter got an owner")
	}
}

// TestCronSkipWithRedisDownDecidesNothing: onBusy Skip cannot tell whether the lock is held while
// Redis is down, so the run is neither skipped nor created; the pass fails (the runtime retries)
// and a Warning Event says why.
func TestCronSkipWithRedisDownDecidesNothing(t *testing.T) {
	srv := redisserver.Start(t)
	lockClient, err := redislock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 10, 0, 20, 0, time.UTC)
	u := newCronUnitRig(t, now)
	u.r.Locks = unit.Book(t, lockClient)
	u.cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
	if err := u.api.Update(context.Background(), u.cj); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)

	if _, err := u.reconcile(); err == nil {
		t.Fatal("reconcile succeeded with Redis down; want an error so the runtime retries")
	}
	var list batchv1alpha1.LockedJobList
	if err := u.api.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	if st := u.status(); len(list.Items) != 0 || st.SkippedRuns != 0 || st.LastScheduleTime != nil {
		t.Errorf("%d LockedJobs, %d skipped, lastScheduleTime %v; want the run undecided", len(list.Items), st.SkippedRuns, st.LastScheduleTime)
	}
	if u.events.Count(batchv1alpha1.ReasonRedisUnavailable) != 1 {
		t.Errorf("Events %v, want one %s", u.events.Reasons(), batchv1alpha1.ReasonRedisUnavailable)
	}
}

// TestCronSkipNeverReadsALockItsNamespaceMayNotUse: where the operator does not allow Cluster
// scope, onBusy Skip does not ask Redis about the Cluster lock (held here by another namespace's
// LockedJob), skips nothing because of it, and names no holder; ScopeAllowed and a Warning Event
// say why no run comes.
func TestCronSkipNeverReadsALockItsNamespaceMayNotUse(t *testing.T) {
	ctx := context.Background()
	book, lockClient, rc := unit.Locks(t)
	now := time.Date(2026, 12, 1, 10, 0, 20, 0, time.UTC)
	u := newCronUnitRig(t, now)
	u.r.Locks, u.r.ClusterScopeNamespaces = book, locks.ScopeGate{"trusted"}
	u.cj.Spec.OnBusy = batchv1alpha1.OnBusySkip
	u.cj.Spec.LockedJobTemplate.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
	if err := u.api.Update(ctx, u.cj); err != nil {
		t.Fatal(err)
	}
	const holder = "c/trusted/holder/uid-hold"
	if _, err := lockClient.Acquire(ctx, u.r.Identity.LockKey(locks.ClaimantOf(runLock(u.cj))), time.Minute, redislock.WithMetadata(holder)); err != nil {
		t.Fatal(err)
	}

	before := unit.ScriptCalls(t, rc)
	res, err := u.reconcile()
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if calls := unit.ScriptCalls(t, rc) - before; calls != 0 {
		t.Errorf("the pass ran %d Redis scripts, want 0: the lock is another tenant's", calls)
	}
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %v, want none: no run comes until the spec or the operator changes", res.RequeueAfter)
	}
	var list batchv1alpha1.LockedJobList
	if err := u.api.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	st := u.status()
	if len(list.Items) != 0 || st.SkippedRuns != 0 || st.LastSkippedTime != nil || st.NextScheduleTime != nil {
		t.Errorf("%d LockedJobs, %d skipped (last %v), next %v; want no run, none skipped, no next time",
			len(list.Items), st.SkippedRuns, st.LastSkippedTime, st.NextScheduleTime)
	}
	c := meta.FindStatusCondition(st.Conditions, batchv1alpha1.ConditionScopeAllowed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != batchv1alpha1.ReasonScopeNotAllowed {
		t.Fatalf("ScopeAllowed = %+v, want False with reason %s", c, batchv1alpha1.ReasonScopeNotAllowed)
	}
	for _, c := range st.Conditions {
		if strings.Contains(c.Message, "trusted") {
			t.Errorf("condition %s names the holder or the trusted namespaces: %q", c.Type, c.Message)
		}
	}
	if u.events.Count(batchv1alpha1.ReasonSkipped) != 0 || u.events.Count(batchv1alpha1.ReasonScopeNotAllowed) != 1 {
		t.Errorf("Events %v, want one %s and no %s", u.events.Reasons(), batchv1alpha1.ReasonScopeNotAllowed, batchv1alpha1.ReasonSkipped)
	}

	// The next pass says nothing new: one Warning Event, not one per pass.
	if _, err := u.reconcile(); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if n := u.events.Count(batchv1alpha1.ReasonScopeNotAllowed); n != 1 {
		t.Errorf("%d %s Events after two passes, want 1", n, batchv1alpha1.ReasonScopeNotAllowed)
	}
}

// TestEveryWriterCutsItsMessage (#23): the LockedCronJob's writer that quotes a foreign cause of any length
// (an invalid schedule, in the parser's words) leaves conditions and Event notes the API server
// takes. controllers/lockedjob and controllers/lockview check theirs.
func TestEveryWriterCutsItsMessage(t *testing.T) {
	t.Run("a LockedCronJob's schedule is invalid", func(t *testing.T) {
		u := newCronUnitRig(t, time.Now())
		u.r.setScheduleValid(&cronPass{cj: u.cj, scheduleErr: unit.LongCause, scheduleReason: batchv1alpha1.ReasonInvalidSchedule})
		for _, c := range u.cj.Status.Conditions {
			unit.CheckCut(t, "condition "+c.Type, c.Message)
		}
		if len(u.events.Notes()) == 0 {
			t.Fatal("no Event told the invalid schedule")
		}
		for _, note := range u.events.Notes() {
			unit.CheckCut(t, "Event note", note)
		}
	})

}
