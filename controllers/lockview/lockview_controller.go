package lockview

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// The per-lock view (docs/design.md, "Semaphores and the per-lock view"): a declared Lock or
// ClusterLock shows its lock as Redis holds it. Its status is read from Redis when a LockedJob of
// the lock changes, and every Resync for what nobody here announces (an expiry, another cluster's
// holder); it is written only when it changed: at once after a quiet time, and once a burst of
// changes has spent WriteBurst writes, at most once per MinInterval (writeBudget).

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks;clusterlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks/status;clusterlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks/finalizers;clusterlocks/finalizers,verbs=update

// LockViewReconciler keeps the status of Lock and ClusterLock objects.
type LockViewReconciler struct {
	client.Client
	Locks    *lockbook.Book
	Identity locks.Identity
	Clock    clock.PassiveClock
	Timing
	// RedisTimeout bounds each Redis read (default 2s).
	RedisTimeout time.Duration
	// Member names this process among the clients of the Redis (Client.Announce): the cluster ID
	// and the host name by default, so an old leader still running beside a new one is seen.
	Member string

	mu      sync.Mutex
	written map[types.NamespacedName]writeBudget // by object (namespace "" for ClusterLock)
	// behind are the clients of the Redis that announce an older lock protocol than
	// lockbook.SemaphoreProtocol, as of the last announcement; nil before the first (see announce).
	behind *[]lockbook.Announced
	// announced is closed by the first announcement that Redis answered.
	announced chan struct{}

	// GuardedJobs is the cache of guarded Jobs (guardedjob.NewCache): their changes read the view of
	// their lock again, as LockedJobs' do. Nil when the operator runs no guarded-Job reconciler.
	GuardedJobs cache.Cache

	// orphans carry, to each kind's controller, the names of locks whose permits Redis stores
	// while no object of that name may exist (see findOrphans).
	orphanLocks, orphanClusterLocks chan event.GenericEvent
}

// Timing is how often the view writes, reads Redis again and announces; zero values take the
// defaults.
type Timing struct {
	// MinInterval is the least time between two status writes of one lock once a burst has spent
	// its WriteBurst (default 1s).
	MinInterval time.Duration
	// WriteBurst is how many status writes of one lock may follow each other at once after a
	// quiet time (default 3): a handoff is shown when it happens, a burst of changes is coalesced.
	WriteBurst int
	// Resync is how often a declared lock is read again when nothing announced a change (default 2m).
	Resync time.Duration
	// Announce is how often the process announces its lock protocol (default 30s); an announcement
	// lasts four times as long.
	Announce time.Duration
}

const permitsFinalizer = batchv1alpha1.FinalizerPermits

// SetupWithManager registers one controller per kind; both map LockedJob changes to the view of
// their lock.
func (r *LockViewReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.MinInterval = sreconcile.DurationOr(r.MinInterval, time.Second)
	if r.WriteBurst <= 0 {
		r.WriteBurst = 3
	}
	r.Resync = sreconcile.DurationOr(r.Resync, 2*time.Minute)
	r.RedisTimeout = sreconcile.DurationOr(r.RedisTimeout, 2*time.Second)
	r.Announce = sreconcile.DurationOr(r.Announce, 30*time.Second)
	if r.Member == "" {
		host, _ := os.Hostname()
		r.Member = r.Identity.ClusterID + "/" + host
	}
	r.written = map[types.NamespacedName]writeBudget{}
	r.announced = make(chan struct{})
	r.orphanLocks, r.orphanClusterLocks = make(chan event.GenericEvent), make(chan event.GenericEvent)
	if kind := sreconcile.UnservedKind(mgr, "Lock", "ClusterLock"); kind != "" {
		sreconcile.SkipUnserved("the per-lock view", kind)
		return nil
	}
	for _, run := range []manager.RunnableFunc{r.findOrphans, r.announce} {
		if err := mgr.Add(run); err != nil {
			return fmt.Errorf("set up the lock view's runnables: %w", err)
		}
	}
	// The view's own status writes must not trigger a read: only spec changes and LockedJobs do.
	onlySpec := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	if err := r.claimantsOf(ctrl.NewControllerManagedBy(mgr).For(&batchv1alpha1.Lock{}, onlySpec), mgr, batchv1alpha1.LockScopeNamespace).
		WatchesRawSource(source.Channel(r.orphanLocks, &handler.EnqueueRequestForObject{})).
		Named("lock").
		Complete(reconcile.Func(r.reconcileLock)); err != nil {
		return fmt.Errorf("set up lock view controller: %w", err)
	}
	if err := r.claimantsOf(ctrl.NewControllerManagedBy(mgr).For(&batchv1alpha1.ClusterLock{}, onlySpec), mgr, batchv1alpha1.LockScopeCluster).
		WatchesRawSource(source.Channel(r.orphanClusterLocks, &handler.EnqueueRequestForObject{})).
		Named("clusterlock").
		Complete(reconcile.Func(r.reconcileClusterLock)); err != nil {
		return fmt.Errorf("set up cluster lock view controller: %w", err)
	}
	return nil
}

// claimantsOf has b read the view of a lock of scope again when one of its claimants changes: a
// LockedJob, and a guarded Job when the operator guards Jobs.
func (r *LockViewReconciler) claimantsOf(b *builder.Builder, mgr ctrl.Manager, scope batchv1alpha1.LockScope) *builder.Builder {
	b = b.Watches(&batchv1alpha1.LockedJob{}, handler.EnqueueRequestsFromMapFunc(viewOf(mgr.GetCache(), scope)))
	if r.GuardedJobs == nil {
		return b
	}
	return b.WatchesRawSource(source.Kind(r.GuardedJobs, &batchv1.Job{},
		handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, job *batchv1.Job) []reconcile.Request {
			return viewOf(mgr.GetCache(), scope)(ctx, job)
		})))
}

// viewOf maps a claimant (a LockedJob or a guarded Job) to the view object of its lock, for locks of the given scope, when that
// object exists in the cache: most locks are not declared, and their claimants' changes should cost
// no pass of the view (a cache lookup instead of a queue item and a reconcile).
func viewOf(views client.Reader, scope batchv1alpha1.LockScope) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var c locks.Claimant
		switch o := o.(type) {
		case *batchv1alpha1.LockedJob:
			c = locks.ClaimantOf(o)
		case *batchv1.Job:
			var err error
			if c, err = locks.ClaimantOfJob(o); err != nil {
				return nil // it names no lock the view could show
			}
		default:
			return nil
		}
		if c.Lock.ScopeOrDefault() != scope {
			return nil
		}
		view, name := locks.Declaration(c)
		if err := views.Get(ctx, name, view); apierrors.IsNotFound(err) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: name}}
	}
}

func (r *LockViewReconciler) reconcileLock(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	l := &batchv1alpha1.Lock{}
	key := r.Identity.KeyOf(batchv1alpha1.LockScopeNamespace, req.Namespace, req.Name)
	if err := r.Get(ctx, req.NamespacedName, l); apierrors.IsNotFound(err) {
		return r.retireKey(ctx, key)
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !l.DeletionTimestamp.IsZero() {
		return r.retire(ctx, l, key)
	}
	admitted, err := r.settlePermits(ctx, l, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	return r.refresh(ctx, l, &l.Status, key, l.Namespace, admitted)
}

func (r *LockViewReconciler) reconcileClusterLock(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	l := &batchv1alpha1.ClusterLock{}
	key := r.Identity.KeyOf(batchv1alpha1.LockScopeCluster, "", req.Name)
	if err := r.Get(ctx, req.NamespacedName, l); apierrors.IsNotFound(err) {
		return r.retireKey(ctx, key)
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !l.DeletionTimestamp.IsZero() {
		return r.retire(ctx, l, key)
	}
	admitted, err := r.settlePermits(ctx, l, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	return r.refresh(ctx, l, &l.Status, key, "", admitted)
}

// writeBudget is one lock's allowance of status writes, a token bucket: WriteBurst writes, one
// more earned per MinInterval. A view whose lock changed after a quiet time has a write to spend
// at once; only a burst of changes waits.
type writeBudget struct {
	spent float64   // writes spent and not yet earned back, as of at
	at    time.Time // of the last write
}

// left is how many writes b has at now, of burst.
func (b writeBudget) left(now time.Time, every time.Duration, burst int) float64 {
	earned := float64(now.Sub(b.at)) / float64(every)
	return float64(burst) - max(b.spent-earned, 0)
}

// writeWait is how long the view of id must wait before its next status write.
func (r *LockViewReconciler) writeWait(id types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.written[id]
	if !ok {
		return 0
	}
	left := b.left(r.Clock.Now(), r.MinInterval, r.WriteBurst)
	if left >= 1 {
		return 0
	}
	return time.Duration((1 - left) * float64(r.MinInterval))
}

func (r *LockViewReconciler) wrote(id types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Clock.Now()
	left := float64(r.WriteBurst)
	if b, ok := r.written[id]; ok {
		left = b.left(now, r.MinInterval, r.WriteBurst)
	}
	r.written[id] = writeBudget{spent: float64(r.WriteBurst) - left + 1, at: now}
}

// forget drops what is known of a deleted object, so a new one of the same name starts afresh.
func (r *LockViewReconciler) forget(id types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.written, id)
}
