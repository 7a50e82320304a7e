package lockedjob

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// unitRig is one reconciler over a fake API server (which answers for the cache too, unless a
// test intercepts it) and a real redis-server.
type unitRig struct {
	t      *testing.T
	api    client.WithWatch
	client client.Client // api behind the test's interceptor: what the reconciler writes through
	r      *LockedJobReconciler
	lib    *redislock.Client // the book's lock client, for a test that sets Redis up
	events *unit.Events
	lj     *batchv1alpha1.LockedJob
	req    ctrl.Request
}

func newUnitRig(t *testing.T, funcs interceptor.Funcs, opts ...redislock.Option) *unitRig {
	t.Helper()
	book, lib, _ := unit.Locks(t, opts...)
	lj := unit.LockedJob("unit", "uid-unit")
	api := fake.NewClientBuilder().WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).WithObjects(lj).Build()
	events := &unit.Events{}
	u := &unitRig{t: t, api: api, client: interceptor.NewClient(api, funcs), lib: lib, events: events, lj: lj, req: ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lj)}}
	u.r = u.reconciler(book)
	return u
}

// reconciler is the rig's reconciler over book: it writes and reads its cache through the
// intercepted client and reads the API server directly.
func (u *unitRig) reconciler(book *lockbook.Book) *LockedJobReconciler {
	r := &LockedJobReconciler{
		Client: u.client, APIReader: u.api, Scheme: u.api.Scheme(), Locks: book,
		Recorder: u.events, Clock: clock.RealClock{},
		Config: Config{Identity: locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}},
	}
	r.Config.defaults()
	return r
}

// restart is an operator crash and restart: the book stops, and a new reconciler starts with an
// empty one.
func (u *unitRig) restart() {
	u.r.Locks.Stop()
	u.r = u.reconciler(unit.Book(u.t, u.lib))
}

func (u *unitRig) reconcile() {
	u.t.Helper()
	if _, err := u.r.Reconcile(context.Background(), u.req); err != nil {
		u.t.Fatalf("reconcile: %v", err)
	}
}

func (u *unitRig) get() *batchv1alpha1.LockedJob {
	u.t.Helper()
	lj := &batchv1alpha1.LockedJob{}
	if err := u.api.Get(context.Background(), u.req.NamespacedName, lj); err != nil {
		u.t.Fatal(err)
	}
	return lj
}

// runToRunning reconciles until the LockedJob runs its Job.
func (u *unitRig) runToRunning() *batchv1alpha1.LockedJob {
	u.t.Helper()
	for range 4 {
		u.reconcile()
		if lj := u.get(); lj.Status.Phase == batchv1alpha1.PhaseRunning {
			return lj
		}
	}
	u.t.Fatalf("not running: %+v", u.get().Status)
	return nil
}

// TestLostLockStopsAJobTheCacheDoesNotHaveYet (#13): a lock lost while the Job is not yet in the
// informer cache must still stop the Job; the LockedJob never goes terminal with a Job running
// unstopped.
func TestLostLockStopsAJobTheCacheDoesNotHaveYet(t *testing.T) {
	var hideJobs bool
	u := newUnitRig(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*batchv1.Job); ok && hideJobs {
				return apierrors.NewNotFound(batchv1.Resource("jobs"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	running := u.runToRunning()
	hideJobs = true // the cache lags behind the API server
	u.r.Locks.MarkLost(workloadOf(running), fmt.Errorf("injected: %w", redislock.ErrLockLost))
	u.reconcile()

	if got := u.get(); got.Status.Phase != batchv1alpha1.PhaseLockLost {
		t.Fatalf("phase %s, want LockLost", got.Status.Phase)
	}
	job := &batchv1.Job{}
	if err := u.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: running.Status.JobName}, job); err != nil {
		t.Fatal(err)
	}
	if job.Spec.Suspend == nil || !*job.Spec.Suspend {
		t.Fatal("the Job runs on unstopped although its lock was lost")
	}
}

// TestStalePassAfterLockLostDoesNotReadopt (#28, #19): a pass that read the LockedJob before its
// LockLost status arrived must not re-adopt the lock (the key may still be alive), and its status
// write must not overwrite the newer one.
func TestStalePassAfterLockLostDoesNotReadopt(t *testing.T) {
	var stale *batchv1alpha1.LockedJob
	u := newUnitRig(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if lj, ok := obj.(*batchv1alpha1.LockedJob); ok && stale != nil {
				stale.DeepCopyInto(lj)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	running := u.runToRunning()
	// The keeper gave the lock up (e.g. validity ran out during a stall) while the key lives on.
	u.r.Locks.MarkLost(workloadOf(running), fmt.Errorf("injected: %w", redislock.ErrLockLost))
	u.reconcile()
	if got := u.get(); got.Status.Phase != batchv1alpha1.PhaseLockLost {
		t.Fatalf("phase %s, want LockLost", got.Status.Phase)
	}

	stale = running // the cache still has the Running object
	u.reconcile()
	if n := u.events.Count(batchv1alpha1.ReasonReadopted); n != 0 {
		t.Fatalf("a stale pass re-adopted the lost lock (%d Readopted events)", n)
	}
	if u.r.Locks.Holding(running.UID) != nil {
		t.Fatal("a stale pass took the lock again")
	}
	stale = nil
	if got := u.get(); got.Status.Phase != batchv1alpha1.PhaseLockLost {
		t.Fatalf("the stale pass overwrote LockLost with %s", got.Status.Phase)
	}
}

// TestLockNameFollowsTheRecordedKey (#21): a lock acquired under an older key layout is re-adopted
// and released by the key status recorded, not by the one the operator derives today.
func TestLockNameFollowsTheRecordedKey(t *testing.T) {
	srv := redisserver.Start(t)
	lockClient, err := redislock.New(srv.Client(t), redislock.WithKeyPrefix("p:"))
	if err != nil {
		t.Fatal(err)
	}
	book := lockbook.New(lockClient)
	t.Cleanup(book.Stop)
	r := &LockedJobReconciler{Locks: book, Config: Config{Identity: locks.Identity{ClusterID: "c"}}}
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n"},
		Spec: batchv1alpha1.LockedJobSpec{Lock: batchv1alpha1.LockSpec{Name: "db"}}}
	derived := r.Config.Identity.LockKey(locks.ClaimantOf(lj))
	if got := r.lockName(lj); got != derived {
		t.Fatalf("not yet acquired: %q, want the derived %q", got, derived)
	}
	fence := int64(7)
	lj.Status.FencingToken = &fence
	lj.Status.LockKey = "p:{ns/ns/db}" // the layout before cluster IDs
	if got := r.lockName(lj); got != "ns/ns/db" {
		t.Fatalf("held under the old key: %q, want ns/ns/db", got)
	}
	lj.Status.LockKey = "other:{x}" // another prefix: not ours to interpret
	if got := r.lockName(lj); got != derived {
		t.Fatalf("foreign key: %q, want the derived %q", got, derived)
	}
}

// TestLegacyKeyHolderBlocksAcquisition (#21): during an upgrade, a LockedJob holding the lock under
// the old key layout blocks a fresh acquisition under the new one; a legacy key handed to this very
// LockedJob is given back instead.
func TestLegacyKeyHolderBlocksAcquisition(t *testing.T) {
	u := newUnitRig(t, interceptor.Funcs{})
	u.r.Config.LegacyLockKeys = true
	ctx := context.Background()
	rdb := u.lib
	legacy, _ := u.r.Config.Identity.LegacyLockKey(locks.ClaimantOf(u.lj))
	other, err := rdb.Acquire(ctx, legacy, time.Minute, redislock.WithMetadata("old-holder"))
	if err != nil {
		t.Fatal(err)
	}
	u.reconcile() // the finalizer, then the attempt
	got := u.get()
	if got.Status.Phase != batchv1alpha1.PhaseWaiting || got.Status.BlockedBy != "old-holder" {
		t.Fatalf("phase %s blocked by %q, want Waiting behind old-holder", got.Status.Phase, got.Status.BlockedBy)
	}
	if st, _ := rdb.Inspect(ctx, u.r.Config.Identity.LockKey(locks.ClaimantOf(u.lj))); st.Held {
		t.Fatal("the lock was acquired under the new key while the old one is held")
	}

	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A release handed the old key to this LockedJob as a queued waiter: it must not wait for itself.
	if _, err := rdb.Acquire(ctx, legacy, time.Minute, redislock.WithToken(u.r.Config.Identity.Token(locks.ClaimantOf(u.lj)))); err != nil {
		t.Fatal(err)
	}
	u.r.waiting.Wake(u.r.Config.Identity.Holder(locks.ClaimantOf(u.lj))) // as its re-check falls due
	u.runToRunning()
	if st, _ := rdb.Inspect(ctx, legacy); st.Held {
		t.Fatal("the old key handed to this LockedJob was not given back")
	}
}

// TestStaleStatusWriteIsRefused (#19): the status a pass records is an optimistic patch: a pass
// that read an older version of the LockedJob cannot overwrite what a newer pass recorded.
func TestStaleStatusWriteIsRefused(t *testing.T) {
	u := newUnitRig(t, interceptor.Funcs{})
	running := u.runToRunning()

	// A newer pass records the end of the run.
	done := running.DeepCopy()
	done.Status.Phase = batchv1alpha1.PhaseSucceeded
	if err := u.api.Status().Update(context.Background(), done); err != nil {
		t.Fatal(err)
	}
	// A pass that read the Running object decides something else.
	stale := &pass{lj: running.DeepCopy(), before: running.DeepCopy(), obs: observation{hasFinalizer: true}}
	stale.lj.Status.Phase = batchv1alpha1.PhaseLockLost
	raced, err := u.r.record(context.Background(), stale, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Error("the stale write was not reported as a lost race")
	}
	if got := u.get().Status.Phase; got != batchv1alpha1.PhaseSucceeded {
		t.Fatalf("a stale pass overwrote Succeeded with %s", got)
	}
}

// TestDeletionWritesNoStatus (#13): the pass that lets a deleted LockedJob go removes the
// finalizer and writes nothing else; a status patch of an object that is gone costs the API server
// a request per deletion and tells nobody anything.
func TestDeletionWritesNoStatus(t *testing.T) {
	statusPatches := 0
	u := newUnitRig(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			statusPatches++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	running := u.runToRunning()
	// The API server bumps the generation when it marks an object for deletion; the fake does not.
	if err := u.api.Delete(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	lj := u.get()
	lj.Generation++
	if err := u.api.Update(context.Background(), lj); err != nil {
		t.Fatal(err)
	}
	before := statusPatches
	for range 3 { // delete the Job, then release and let go
		if _, err := u.r.Reconcile(context.Background(), u.req); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.api.Get(context.Background(), u.req.NamespacedName, &batchv1alpha1.LockedJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the LockedJob is still there (%v): the finalizer was not removed", err)
	}
	if n := statusPatches - before; n != 0 {
		t.Fatalf("deleting a running LockedJob patched its status %d times, want 0", n)
	}
}

// TestFinishedLockedJobIsLetGo (#13): a LockedJob that finished and released its lock loses its
// finalizer, so deleting it needs no pass of the operator; one whose Job may still run keeps it.
func TestFinishedLockedJobIsLetGo(t *testing.T) {
	// The order of the finishing pass's writes: the outcome must be stored before the finalizer goes.
	var writes []string
	u := newUnitRig(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if lj, ok := obj.(*batchv1alpha1.LockedJob); ok && !controllerutil.ContainsFinalizer(lj, finalizer) {
				writes = append(writes, "let go")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if lj, ok := obj.(*batchv1alpha1.LockedJob); ok && lj.Status.Phase.IsTerminal() {
				writes = append(writes, "outcome")
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	running := u.runToRunning()
	completeJob(t, u.api, running.Status.JobName)
	u.reconcile() // finish: release, record Succeeded, forget, let go
	got := u.get()
	if got.Status.Phase != batchv1alpha1.PhaseSucceeded || controllerutil.ContainsFinalizer(got, finalizer) {
		t.Fatalf("phase %s, finalizers %v: want Succeeded and let go in the pass that ended it", got.Status.Phase, got.Finalizers)
	}
	if want := []string{"outcome", "let go"}; !slices.Equal(writes, want) {
		t.Fatalf("writes of the finishing pass %v, want %v: the end recorded before the finalizer goes", writes, want)
	}
	u.reconcile() // nothing: the finalizer is not added again
	if controllerutil.ContainsFinalizer(u.get(), finalizer) {
		t.Fatal("the finalizer of a finished LockedJob was added again")
	}
	if err := u.api.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if err := u.api.Get(context.Background(), u.req.NamespacedName, &batchv1alpha1.LockedJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleting a finished LockedJob waits for the operator: %v", err)
	}
}

// TestLockLostWithARunningJobKeepsItsFinalizer: a LockedJob that lost its lock while its Job runs
// on (spec.lock.onLockLost Ignore) keeps the finalizer, so deleting it still stops the Job first.
func TestLockLostWithARunningJobKeepsItsFinalizer(t *testing.T) {
	u := newUnitRig(t, interceptor.Funcs{})
	lj := u.get()
	lj.Spec.Lock.OnLockLost = batchv1alpha1.LockLostIgnore
	if err := u.api.Update(context.Background(), lj); err != nil {
		t.Fatal(err)
	}
	running := u.runToRunning()
	u.r.Locks.MarkLost(workloadOf(running), fmt.Errorf("injected: %w", redislock.ErrLockLost))
	u.reconcile() // LockLost, the Job runs on
	u.reconcile() // forget
	got := u.get()
	if got.Status.Phase != batchv1alpha1.PhaseLockLost || !controllerutil.ContainsFinalizer(got, finalizer) {
		t.Fatalf("phase %s, finalizers %v: want LockLost with the finalizer kept", got.Status.Phase, got.Finalizers)
	}
}

// TestAStalePassWritesNoPermitsBack (#23): a pass that read its Lock from a lagging cache (3
// permits, lowered to 2 since) asks Redis for 3; with 2 held it waits, and Redis keeps 2: a plain
// acquisition, which obeys what Redis keeps, is refused too.
func TestAStalePassWritesNoPermitsBack(t *testing.T) {
	u := newUnitRig(t, interceptor.Funcs{})
	stale := &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Spec: batchv1alpha1.LockViewSpec{Permits: 3}}
	u.r.permits = locks.PermitReader{Reader: fake.NewClientBuilder().WithScheme(u.api.Scheme()).WithObjects(stale).Build(), Served: true}
	ctx := context.Background()
	key, lib := u.r.Config.Identity.LockKey(locks.ClaimantOf(u.lj)), u.lib
	if err := lib.SetPermits(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"x", "y"} {
		if _, err := lib.Acquire(ctx, key, time.Minute, redislock.WithPermits(3), redislock.WithMetadata(m)); err != nil {
			t.Fatalf("holder %s: %v", m, err)
		}
	}
	if err := lib.SetPermits(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		u.reconcile()
	}
	if lj := u.get(); lj.Status.Phase != batchv1alpha1.PhaseWaiting {
		t.Fatalf("phase %q under 2 of 2 permits held, want Waiting: %+v", lj.Status.Phase, lj.Status)
	}
	if _, err := lib.Acquire(ctx, key, time.Minute); !errors.Is(err, redislock.ErrNotAcquired) {
		t.Fatalf("plain Acquire under 2 of 2 held after the stale pass: %v (the pass wrote its 3 back)", err)
	}
}

// TestStalePassDoesNotCreateADeletedJobAgain (found by the operator model, docs/model.md): a pass
// that read the LockedJob from before its Job's UID was recorded, and finds the Job deleted out of
// band meanwhile, must take it for a Job gone (wait for its pods, record JobDeleted, release), not
// for one never created: creating it again would run the workload twice under one fencing token.
// Its record loses the race, so it releases nothing; the next pass ends it.
func TestStalePassDoesNotCreateADeletedJobAgain(t *testing.T) {
	var stale *batchv1alpha1.LockedJob
	u := newUnitRig(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if lj, ok := obj.(*batchv1alpha1.LockedJob); ok && stale != nil {
				stale.DeepCopyInto(lj)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				obj.SetUID("uid-job") // the fake API server gives none
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	running := u.runToRunning()
	if running.Status.JobUID == "" {
		t.Fatal("the rig records no Job UID")
	}
	ctx := context.Background()
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: running.Namespace, Name: running.Status.JobName}}
	if err := u.api.Delete(ctx, job); err != nil { // kubectl delete job
		t.Fatal(err)
	}
	// The cache has the object as the pass that recorded the fence left it, before the UID.
	stale = running.DeepCopy()
	stale.Status.JobUID, stale.ResourceVersion = "", "1"
	u.reconcile()
	stale = nil

	jobs := &batchv1.JobList{}
	if err := u.api.List(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Fatalf("a stale pass created the deleted Job %s again", jobs.Items[0].Name)
	}
	// It took the Job for gone, and its record of that lost the race: it released nothing either.
	if u.r.Locks.Holding(running.UID) == nil {
		t.Fatal("the stale pass let the lock go before the Job's end was recorded")
	}
	u.reconcile()
	if n := u.events.Count(batchv1alpha1.ReasonJobDeleted); n != 1 {
		t.Fatalf("%d JobDeleted Events, want 1", n)
	}
	if u.r.Locks.Holding(running.UID) != nil {
		t.Fatal("the lock of a Job gone is still held")
	}
	got := u.get()
	if c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionFailed); got.Status.Phase != batchv1alpha1.PhaseFailed ||
		c == nil || c.Reason != batchv1alpha1.ReasonJobDeleted {
		t.Fatalf("phase %s (%+v), want Failed, JobDeleted", got.Status.Phase, got.Status.Conditions)
	}
}
