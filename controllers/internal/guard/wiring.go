package guard

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Wiring is what wakes a guard reconciler's pass, the same for every guarded kind: its objects'
// own cache, the book's lost-lock events and stop handler for its kind, the release waker, and a
// change of a Lock's or ClusterLock's permits.
type Wiring struct {
	// Name names the controller (its metrics and logs).
	Name     string
	Locks    *lockbook.Book
	Identity locks.Identity
	Kind     locks.Kind
	// Objects is the cache the reconciler reads its guarded objects from.
	Objects cache.Cache
	// Named, Waiters: as in ReleaseWaker.
	Named   func(namespace, name string) client.Object
	Waiters func(ctx context.Context, key string) []client.Object
	// Stop stops the workload of a lost lock at once (lockbook.Handlers.StopWorkload).
	Stop func(ctx context.Context, w lockbook.Workload, cause error)
	// Permits and WaitersOfLock: as in sreconcile.WakeOnPermits.
	Permits       locks.PermitReader
	WaitersOfLock sreconcile.WaitersOf
	Workers       int
}

// Complete registers r, reconciling objects like obj, with the manager. It may be called again
// with a new manager after the previous one lost its leadership: everything it registers belongs
// to the manager, and the book's handlers are replaced.
func Complete[T client.Object](mgr ctrl.Manager, obj T, w Wiring, r reconcile.Reconciler) error {
	w.Locks.SetHandlers(w.Kind, lockbook.Handlers{StopWorkload: w.Stop})
	wake := make(chan event.GenericEvent, 256)
	waker := &ReleaseWaker{Locks: w.Locks, Identity: w.Identity, Kind: w.Kind, Named: w.Named,
		Waiters: w.Waiters, Wake: wake}
	if err := mgr.Add(waker); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(w.Name).
		WatchesRawSource(source.Kind(w.Objects, obj, &handler.TypedEnqueueRequestForObject[T]{})).
		WatchesRawSource(source.Channel(w.Locks.Events(w.Kind), &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{}))
	return sreconcile.WakeOnPermits(b, w.Permits, w.WaitersOfLock).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(w.Workers, 1)}).
		Complete(r)
}
