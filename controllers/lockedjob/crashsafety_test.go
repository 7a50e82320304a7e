package lockedjob

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestFenceIsStoredBeforeTheJob: when the status write after acquiring the lock fails, the next pass
// must store holder and fencing token before it creates the Job — otherwise a crash between the
// two would leave a Job the operator cannot tie to its acquisition.
func TestFenceIsStoredBeforeTheJob(t *testing.T) {
	book, _, _ := unit.Locks(t)

	lj := unit.LockedJob("careful", "uid-1")
	var (
		mu         sync.Mutex
		failStatus bool
		writes     []string // "status:<fence stored?>" and "create:<kind>", in order
	)
	fc := fake.NewClientBuilder().
		WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).
		WithObjects(lj).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				mu.Lock()
				defer mu.Unlock()
				if failStatus {
					return errors.New("injected: API server unavailable")
				}
				data, _ := patch.Data(obj)
				var p struct {
					Status struct {
						FencingToken *int64 `json:"fencingToken"`
					} `json:"status"`
				}
				_ = json.Unmarshal(data, &p)
				writes = append(writes, "status:fence="+map[bool]string{true: "yes", false: "no"}[p.Status.FencingToken != nil])
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				mu.Lock()
				if _, ok := obj.(*batchv1.Job); ok {
					writes = append(writes, "create:job")
				} else {
					writes = append(writes, "create:other")
				}
				mu.Unlock()
				return c.Create(ctx, obj, opts...)
			},
		}).Build()

	r := &LockedJobReconciler{
		Client: fc, APIReader: fc, Scheme: fc.Scheme(), Locks: book, Clock: clock.RealClock{},
		Config: Config{Identity: locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}},
	}
	r.Config.defaults()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lj)}
	ctx := context.Background()

	mu.Lock()
	failStatus = true // the finalizer is metadata: only the status writes fail
	mu.Unlock()
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the pass whose status writes fail should return an error")
	}
	if book.Holding(lj.UID) == nil {
		t.Fatal("the lock should have been acquired in the failing pass")
	}
	var jobs batchv1.JobList
	if err := fc.List(ctx, &jobs); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("a Job was created although the fence could not be stored: %d jobs, %v", len(jobs.Items), err)
	}

	mu.Lock()
	failStatus, writes = false, nil
	mu.Unlock()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("recovering pass: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	jobAt, fenceAt := -1, -1
	for i, w := range writes {
		if w == "create:job" && jobAt < 0 {
			jobAt = i
		}
		if w == "status:fence=yes" && fenceAt < 0 {
			fenceAt = i
		}
	}
	if jobAt < 0 || fenceAt < 0 || fenceAt > jobAt {
		t.Fatalf("writes %v: want the fence stored before the Job is created", writes)
	}
}

// TestDeletionReleasesALockTakenBeforeACrash (#17): an operator that took the lock and crashed
// before it could record that in status leaves a lock only the token names. Deleting the LockedJob
// must release it at once, not leave it to block the lock for a whole ttl.
func TestDeletionReleasesALockTakenBeforeACrash(t *testing.T) {
	srv := redisserver.Start(t)
	rdb := srv.Client(t)
	lockClient, err := redislock.New(rdb, redislock.WithKeyPrefix("t:"))
	if err != nil {
		t.Fatal(err)
	}
	lj := unit.LockedJob("crashy", "uid-17")
	var failStatus atomic.Bool
	fc := fake.NewClientBuilder().
		WithScheme(unit.Scheme(t)).
		WithStatusSubresource(&batchv1alpha1.LockedJob{}).
		WithObjects(lj).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if failStatus.Load() {
					return errors.New("injected: API server unavailable")
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	id := locks.Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	newReconciler := func() (*LockedJobReconciler, *lockbook.Book) {
		book := lockbook.New(lockClient)
		r := &LockedJobReconciler{
			Client: fc, APIReader: fc, Scheme: fc.Scheme(), Locks: book, Clock: clock.RealClock{},
			Config: Config{Identity: id},
		}
		r.Config.defaults()
		return r, book
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(lj)}
	ctx := context.Background()

	r, book := newReconciler()
	if _, err := r.Reconcile(ctx, req); err != nil { // adds the finalizer
		t.Fatalf("finalizer pass: %v", err)
	}
	failStatus.Store(true)
	_, _ = r.Reconcile(ctx, req) // acquires the lock; recording it fails
	book.Stop()                  // the crash
	key := lockClient.RedisKey(id.LockKey(locks.ClaimantOf(lj)))
	if got := redislock.HolderToken(rdb.Get(ctx, key).Val()); got != id.Token(locks.ClaimantOf(lj)) {
		t.Fatalf("setup: the lock should be held with the LockedJob's token, Redis has %q", got)
	}

	failStatus.Store(false)
	if err := fc.Delete(ctx, lj); err != nil {
		t.Fatal(err)
	}
	r, book = newReconciler()
	t.Cleanup(book.Stop)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("deletion pass: %v", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the lock acquired before the crash is still held after the LockedJob was deleted")
	}
	if err := fc.Get(ctx, req.NamespacedName, &batchv1alpha1.LockedJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the LockedJob should be gone with its finalizer, got %v", err)
	}
}

// withAndWithoutMarks are the two clients a history that the release mark mends runs on, each with
// the outcome it must end in: Succeeded with the marks the operator leaves, LockLost without.
var withAndWithoutMarks = []struct {
	name string
	opts []redislock.Option
	want batchv1alpha1.LockedJobPhase
}{
	{"with release marks", nil, batchv1alpha1.PhaseSucceeded},
	{"without release marks", []redislock.Option{redislock.WithReleaseMarkRetention(0)}, batchv1alpha1.PhaseLockLost},
}

// TestAReleaseWhoseRecordACrashCutOffIsNoLoss: the operator releases a finished LockedJob's lock
// and crashes before it writes the outcome, and the next holder takes the lock. The restarted
// operator's release finds the lock not its own; the release mark tells it the release was its
// own, and the LockedJob ends Succeeded. Without marks the same history ends LockLost
// (docs/design.md, "A release whose record is lost"), which is what the mark mends.
func TestAReleaseWhoseRecordACrashCutOffIsNoLoss(t *testing.T) {
	for _, tc := range withAndWithoutMarks {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var crashed atomic.Bool
			u := newUnitRig(t, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if crashed.Load() {
						return errors.New("injected: the operator crashed before this write")
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			}, tc.opts...)
			running := u.runToRunning()
			completeJob(t, u.api, running.Status.JobName)

			crashed.Store(true)
			if _, err := u.r.Reconcile(ctx, u.req); err == nil {
				t.Fatal("the finishing pass whose outcome write failed returned no error")
			}
			key := u.r.Config.Identity.LockKey(locks.ClaimantOf(u.lj))
			if st, err := u.lib.Inspect(ctx, key); err != nil || st.Held {
				t.Fatalf("setup: the finishing pass should have released the lock: %+v, %v", st, err)
			}
			u.restart()
			next, err := u.lib.Acquire(ctx, key, time.Minute, redislock.WithToken("next-holder"))
			if err != nil {
				t.Fatal(err)
			}
			crashed.Store(false)

			u.endsLeavingTheNextHolder(t, key, next, tc.want)
		})
	}
}

// endsLeavingTheNextHolder reconciles until the LockedJob is terminal (three passes at most) and
// checks that it ended in want and that next still holds the lock named key.
func (u *unitRig) endsLeavingTheNextHolder(t *testing.T, key string, next *redislock.Lock, want batchv1alpha1.LockedJobPhase) {
	t.Helper()
	for range 3 {
		u.reconcile()
		if u.get().Status.Phase.IsTerminal() {
			break
		}
	}
	if got := u.get().Status.Phase; got != want {
		t.Fatalf("phase %s, want %s", got, want)
	}
	if st, err := u.lib.Inspect(context.Background(), key); err != nil || !st.Held || st.Fence != next.Fence() {
		t.Fatalf("the next holder's lock after the passes: %+v, %v", st, err)
	}
}

// completeJob marks the Job named name in namespace ns Complete, as the Job controller would.
func completeJob(t *testing.T, api client.Client, name string) {
	t.Helper()
	job := &batchv1.Job{}
	if err := api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, job); err != nil {
		t.Fatal(err)
	}
	job.Status.Conditions = append(job.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	if err := api.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

// TestAReadoptionFindsItsOwnSuccessorsRelease (found by the operator model with a deposed leader):
// a leader paused past its lease and resumed beside its successor releases a LockedJob's lock at
// its pod's outcome, and the next holder takes the lock; the successor, which knew nothing of that
// release, re-adopts. The release mark tells it the recorded acquisition ended by a release of its
// own token: the LockedJob ends Succeeded once its Job completes, and the next holder's lock is left
// alone. Without marks the re-adoption finds another holder and ends it LockLost.
func TestAReadoptionFindsItsOwnSuccessorsRelease(t *testing.T) {
	for _, tc := range withAndWithoutMarks {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			u := newUnitRig(t, interceptor.Funcs{}, tc.opts...)
			running := u.runToRunning()
			claimant := locks.ClaimantOf(u.lj)
			key, token := u.r.Config.Identity.LockKey(claimant), u.r.Config.Identity.Token(claimant)
			// The deposed leader's release at the pod's outcome, which its successor never saw.
			if err := u.lib.ReleaseToken(ctx, key, token, *running.Status.FencingToken); err != nil {
				t.Fatal(err)
			}
			next, err := u.lib.Acquire(ctx, key, time.Minute, redislock.WithToken("next-holder"))
			if err != nil {
				t.Fatal(err)
			}
			u.restart() // the successor: a book of its own
			u.reconcile()
			completeJob(t, u.api, running.Status.JobName)
			u.endsLeavingTheNextHolder(t, key, next, tc.want)
		})
	}
}
