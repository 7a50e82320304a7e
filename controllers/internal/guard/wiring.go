package guard

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Wiring is what wakes a guard reconciler's pass, the same for every guarded kind: its objects'
// own cache, the book's lost-lock events and stop handler for its kind, the release waker, the
// queue keeper of its wait book, and a change of a Lock's or ClusterLock's permits.
type Wiring struct {
	// Name names the controller (its metrics and logs).
	Name     string
	Locks    *lockbook.Book
	Identity locks.Identity
	// Kind is the kind the reconciler's claimants hold under (their holder names), whose
	// handoffs wake it.
	Kind locks.Kind
	// BookKind, if set, is the kind the book files the reconciler's workloads under (its stop
	// handler and loss events) instead of Kind: two reconcilers whose claimants share a kind (Jobs
	// the guarded-Job reconciler unsuspends, Jobs Kueue admits) each need their own.
	BookKind locks.Kind
	// Objects is the cache the reconciler reads its guarded objects from.
	Objects cache.Cache
	// Waiting is the reconciler's wait book, which the release waker and the queue keeper wake;
	// Config gives the keeper its waiters' liveness and its calls' timeout.
	Waiting *waitbook.Book
	Config  *Config
	// Named, Waiters: as in ReleaseWaker.
	Named   func(namespace, name string) client.Object
	Waiters func(ctx context.Context, key string) []client.Object
	// Stop stops the workload of a lost lock at once (lockbook.Handlers.StopWorkload).
	Stop func(ctx context.Context, w lockbook.Workload, cause error)
	// Sources wake the reconciler besides those above (another object its passes read).
	Sources []source.Source
	// Permits: as in sreconcile.WakeOnPermits.
	Permits locks.PermitReader
	Workers int
}

// Complete registers r, reconciling objects like obj, with the manager. It may be called again
// with a new manager after the previous one lost its leadership: everything it registers belongs
// to the manager, and the book's handlers are replaced.
func Complete[T client.Object](mgr ctrl.Manager, obj T, w Wiring, r reconcile.Reconciler) error {
	bookKind := w.Kind
	if w.BookKind != "" {
		bookKind = w.BookKind
	}
	w.Locks.SetHandlers(bookKind, lockbook.Handlers{StopWorkload: w.Stop})
	wake := make(chan event.GenericEvent, 256)
	waker := &ReleaseWaker{Locks: w.Locks, Identity: w.Identity, Kind: w.Kind, Named: w.Named,
		Waiters: w.Waiters, Waiting: w.Waiting, Wake: wake}
	keeper := &waitbook.Keeper{Locks: w.Locks, Waiting: w.Waiting, Liveness: w.Config.WaiterLiveness(),
		Timeout: w.Config.RedisTimeout, Wake: wake,
		Named: func(o types.NamespacedName) client.Object { return w.Named(o.Namespace, o.Name) }}
	for _, runnable := range []manager.Runnable{waker, keeper} {
		if err := mgr.Add(runnable); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(w.Name).
		WatchesRawSource(source.Kind(w.Objects, obj, &handler.TypedEnqueueRequestForObject[T]{})).
		WatchesRawSource(source.Channel(w.Locks.Events(bookKind), &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{}))
	for _, src := range w.Sources {
		b = b.WatchesRawSource(src)
	}
	return sreconcile.WakeOnPermits(b, w.Permits, w.waitersOfLock).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(w.Workers, 1)}).
		Complete(r)
}

// waitersOfLock wakes the waiters of Kind of the lock that the Lock or ClusterLock decl declares
// (sreconcile.WakeOnPermits): more permits may let them in at once, and nobody else announces it.
// Each of them asks Redis once.
func (w Wiring) waitersOfLock(ctx context.Context, scope batchv1alpha1.LockScope, decl client.Object) []reconcile.Request {
	key := w.Identity.KeyOf(scope, decl.GetNamespace(), decl.GetName())
	waiters := w.Waiters(ctx, w.Locks.RedisKey(key))
	reqs := make([]reconcile.Request, 0, len(waiters))
	for _, o := range waiters {
		obj := client.ObjectKeyFromObject(o)
		if w.Waiting != nil {
			w.Waiting.WakeObject(obj)
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: obj})
	}
	return reqs
}
