package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The per-lock view (docs/design.md, "Semaphores and the per-lock view"): a declared Lock or
// ClusterLock shows its lock as Redis holds it. Its status is read from Redis when a LockedJob of
// the lock changes, and every Resync for what nobody here announces (an expiry, another cluster's
// holder); it is written only when it changed, at most once per MinInterval per lock.

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks;clusterlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks/status;clusterlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=locks/finalizers;clusterlocks/finalizers,verbs=update

// LockViewReconciler keeps the status of Lock and ClusterLock objects.
type LockViewReconciler struct {
	client.Client
	Locks    *LockBook
	Identity Identity
	Clock    clock.PassiveClock
	// MinInterval is the least time between two status writes of one lock (default 5s).
	MinInterval time.Duration
	// Resync is how often a declared lock is read again when nothing announced a change (default 2m).
	Resync time.Duration
	// RedisTimeout bounds each Redis read (default 2s).
	RedisTimeout time.Duration
	// Member names this process among the clients of the Redis (Client.Announce): the cluster ID
	// and the host name by default, so an old leader still running beside a new one is seen.
	Member string
	// Announce is how often the process announces its lock protocol (default 30s); an announcement
	// lasts four times as long.
	Announce time.Duration

	mu      sync.Mutex
	written map[types.NamespacedName]time.Time // last status write, by object (namespace "" for ClusterLock)
	// behind are the clients of the Redis that announce an older lock protocol than
	// redislock.SemaphoreProtocol, as of the last announcement; nil before the first (see announce).
	behind *[]redislock.Announced
	// announced is closed by the first announcement that Redis answered.
	announced chan struct{}

	// orphans carry, to each kind's controller, the names of locks whose permits Redis stores
	// while no object of that name may exist (see findOrphans).
	orphanLocks, orphanClusterLocks chan event.GenericEvent
}

// permitsFinalizer keeps a Lock that declared more than one permit until the operator has set its
// lock back to one in Redis: the number lives there, and a deleted Lock means one holder.
const permitsFinalizer = "batch.lockedjob.dev/permits"

// SetupWithManager registers one controller per kind; both map LockedJob changes to the view of
// their lock.
func (r *LockViewReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.MinInterval = cmpOr(r.MinInterval, 5*time.Second)
	r.Resync = cmpOr(r.Resync, 2*time.Minute)
	r.RedisTimeout = cmpOr(r.RedisTimeout, 2*time.Second)
	r.Announce = cmpOr(r.Announce, 30*time.Second)
	if r.Member == "" {
		host, _ := os.Hostname()
		r.Member = r.Identity.ClusterID + "/" + host
	}
	r.written = map[types.NamespacedName]time.Time{}
	r.announced = make(chan struct{})
	r.orphanLocks, r.orphanClusterLocks = make(chan event.GenericEvent), make(chan event.GenericEvent)
	if kind := unservedKind(mgr, "Lock", "ClusterLock"); kind != "" {
		skipUnserved("the per-lock view", kind)
		return nil
	}
	for _, run := range []manager.RunnableFunc{r.findOrphans, r.announce} {
		if err := mgr.Add(run); err != nil {
			return fmt.Errorf("set up the lock view's runnables: %w", err)
		}
	}
	// The view's own status writes must not trigger a read: only spec changes and LockedJobs do.
	onlySpec := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.Lock{}, onlySpec).
		Watches(&batchv1alpha1.LockedJob{}, handler.EnqueueRequestsFromMapFunc(viewOf(mgr.GetCache(), batchv1alpha1.LockScopeNamespace))).
		WatchesRawSource(source.Channel(r.orphanLocks, &handler.EnqueueRequestForObject{})).
		Named("lock").
		Complete(reconcile.Func(r.reconcileLock)); err != nil {
		return fmt.Errorf("set up lock view controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.ClusterLock{}, onlySpec).
		Watches(&batchv1alpha1.LockedJob{}, handler.EnqueueRequestsFromMapFunc(viewOf(mgr.GetCache(), batchv1alpha1.LockScopeCluster))).
		WatchesRawSource(source.Channel(r.orphanClusterLocks, &handler.EnqueueRequestForObject{})).
		Named("clusterlock").
		Complete(reconcile.Func(r.reconcileClusterLock)); err != nil {
		return fmt.Errorf("set up cluster lock view controller: %w", err)
	}
	return nil
}

// viewOf maps a LockedJob to the view object of its lock, for locks of the given scope, when that
// object exists in the cache: most locks are not declared, and their LockedJobs' changes should cost
// no pass of the view (a cache lookup instead of a queue item and a reconcile).
func viewOf(cache client.Reader, scope batchv1alpha1.LockScope) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		lj, ok := o.(*batchv1alpha1.LockedJob)
		if !ok || lockScope(lj) != scope {
			return nil
		}
		name := types.NamespacedName{Name: lj.Spec.Lock.Name}
		var view client.Object = &batchv1alpha1.ClusterLock{}
		if scope == batchv1alpha1.LockScopeNamespace {
			name.Namespace, view = lj.Namespace, &batchv1alpha1.Lock{}
		}
		if err := cache.Get(ctx, name, view); apierrors.IsNotFound(err) {
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

// settlePermits makes Redis keep the permits the object declares. The view is the one writer of a
// lock's permits in Redis (acquisitions only read them), and the holder of the finalizer: an object
// that declares more than one gets the finalizer before its number is written, so its deletion
// always sets the lock back to one (see retire). The number is written on every pass, not once per
// generation, so Redis comes back to the declaration whatever changed it behind the view's back (a
// Redis that lost its data, an older operator's acquisition that wrote its own number).
func (r *LockViewReconciler) settlePermits(ctx context.Context, obj client.Object, key string) (admitted int, err error) {
	n := permitsIn(obj)
	if n > 1 && !controllerutil.ContainsFinalizer(obj, permitsFinalizer) {
		controllerutil.AddFinalizer(obj, permitsFinalizer)
		if err := r.Update(ctx, obj); err != nil {
			return 0, fmt.Errorf("add finalizer to lock %s: %w", key, err)
		}
	}
	if n > 1 && !r.Locks.HandsOff() {
		return 1, nil // Redlock: its LockedJobs wait, and the view says why
	}
	if n > 1 {
		if err := r.awaitAnnouncement(ctx); err != nil {
			return 0, fmt.Errorf("settle the permits of lock %s: %w", key, err)
		}
		if len(r.olderClients()) > 0 {
			n = 1 // an older client's plain scripts would take slot 0 while the permits are held
		}
	}
	return n, r.setPermits(ctx, key, n)
}

// announce tells the Redis, every Announce, that this process speaks redislock.Protocol, and
// learns who speaks an older one. When that changes (and after the first announcement), every
// declared lock is settled again: a semaphore's permits are stored only while no client of the
// Redis announces a protocol that would not honour them. A client that never announces (one from
// before the announcements) is not seen; docs/design.md, "Upgrades", says how to leave none.
func (r *LockViewReconciler) announce(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("member", r.Member)
	for {
		rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
		all, err := r.Locks.Announce(rctx, r.Member, 4*r.Announce)
		cancel()
		if err != nil {
			log.Error(err, "Announcing the lock protocol failed; trying again after the announce period")
		} else if r.setOlderClients(older(all)) {
			log.Info("Settling every declared lock again: the clients of older lock protocols changed", "older", older(all))
			r.settleAll(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Announce):
		}
	}
}

// awaitAnnouncement waits, at most RedisTimeout, for the first announcement to be answered: until
// then nobody knows whether a semaphore is safe on this Redis.
func (r *LockViewReconciler) awaitAnnouncement(ctx context.Context) error {
	t := time.NewTimer(r.RedisTimeout)
	defer t.Stop()
	select {
	case <-r.announced:
		return nil
	case <-t.C:
		return errors.New("this operator's lock protocol has not been announced to Redis yet")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// older keeps the clients whose protocol cannot honour a semaphore.
func older(all []redislock.Announced) []redislock.Announced {
	return slices.DeleteFunc(slices.Clone(all), func(a redislock.Announced) bool { return a.Protocol >= redislock.SemaphoreProtocol })
}

// olderClients returns the clients of older lock protocols as of the last announcement (none
// before the first: settlePermits waits for it).
func (r *LockViewReconciler) olderClients() []redislock.Announced {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind == nil {
		return nil
	}
	return *r.behind
}

// setOlderClients records behind and reports whether it changed (or was not known before).
func (r *LockViewReconciler) setOlderClients(behind []redislock.Announced) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind != nil && slices.Equal(*r.behind, behind) {
		return false
	}
	if r.behind == nil {
		close(r.announced)
	}
	r.behind = &behind
	return true
}

// settleAll sends every declared Lock and ClusterLock to its controller.
func (r *LockViewReconciler) settleAll(ctx context.Context) {
	var locks batchv1alpha1.LockList
	var clusterLocks batchv1alpha1.ClusterLockList
	if err := r.List(ctx, &locks); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Locks to settle failed")
	}
	if err := r.List(ctx, &clusterLocks); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing ClusterLocks to settle failed")
	}
	send := func(ch chan event.GenericEvent, obj client.Object) bool {
		select {
		case ch <- event.GenericEvent{Object: obj}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := range locks.Items {
		if !send(r.orphanLocks, &locks.Items[i]) {
			return
		}
	}
	for i := range clusterLocks.Items {
		if !send(r.orphanClusterLocks, &clusterLocks.Items[i]) {
			return
		}
	}
}

// retire sets the lock of an object being deleted back to one permit and lets the object go once
// the lock is plain again (see retireKey).
func (r *LockViewReconciler) retire(ctx context.Context, obj client.Object, key string) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, permitsFinalizer) {
		return reconcile.Result{}, nil
	}
	res, err := r.retireKey(ctx, key)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	controllerutil.RemoveFinalizer(obj, permitsFinalizer)
	if err := r.Update(ctx, obj); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("remove finalizer of lock %s: %w", key, err)
	}
	r.forget(client.ObjectKeyFromObject(obj))
	return reconcile.Result{}, nil
}

// retireKey sets the lock named key back to one permit, as no declaration means: at once, so nobody
// more is admitted, and the lock is plain again once no holder keeps a slot above 0 (until then
// Redis must go on counting that holder, and the lock is looked at again). It also serves a lock
// whose object is gone without having been retired (its finalizer was taken away, or it was deleted
// while the operator did not run): a stored number that nothing declares would admit holders side
// by side for good.
func (r *LockViewReconciler) retireKey(ctx context.Context, key string) (reconcile.Result, error) {
	if err := r.setPermits(ctx, key, 1); err != nil {
		return reconcile.Result{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	slots, err := r.Locks.Slots(rctx, key)
	cancel()
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("inspect lock %s: %w", key, err)
	}
	if slices.ContainsFunc(slots[1:], func(st redislock.State) bool { return st.Held }) {
		return reconcile.Result{RequeueAfter: r.MinInterval}, nil
	}
	if err := r.setPermits(ctx, key, 1); err != nil { // the upper slots drained since the first write
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// findOrphans looks, at start and every Resync, for locks whose permits Redis stores, and sends each
// lock this cluster may declare to its kind's controller: a lock whose object is gone is retired
// there (reconcileLock), one whose object exists is settled by its usual pass. It runs on the
// leader only, like the controllers.
func (r *LockViewReconciler) findOrphans(ctx context.Context) error {
	for {
		r.sendOrphans(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Resync):
		}
	}
}

func (r *LockViewReconciler) sendOrphans(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	names, err := r.Locks.Semaphores(rctx)
	cancel()
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the locks whose permits Redis stores failed; looking again after the resync period")
		return
	}
	for _, name := range names {
		scope, namespace, lock, ok := r.Identity.Parse(name)
		if !ok {
			continue // another cluster's namespaced lock, or not one of this operator's keys
		}
		var obj client.Object = &batchv1alpha1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: lock}}
		ch := r.orphanLocks
		if scope == batchv1alpha1.LockScopeCluster {
			obj, ch = &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: lock}}, r.orphanClusterLocks
		}
		if err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			continue // declared (its own passes settle it), or the cache cannot say: the next round will
		}
		ev := event.GenericEvent{Object: obj}
		select {
		case ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}

func (r *LockViewReconciler) setPermits(ctx context.Context, key string, n int) error {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	defer cancel()
	if err := r.Locks.SetPermits(rctx, key, n); err != nil {
		return fmt.Errorf("set the permits of lock %s to %d: %w", key, n, err)
	}
	return nil
}

// refresh reads the lock from Redis into *status and writes it when it changed, no sooner than
// MinInterval after the last write. namespace is the Lock's, "" for a ClusterLock; admitted is how
// many Redis admits at once now (see settlePermits).
func (r *LockViewReconciler) refresh(ctx context.Context, obj client.Object, status *batchv1alpha1.LockViewStatus, key, namespace string, admitted int) (reconcile.Result, error) {
	id := client.ObjectKeyFromObject(obj)
	// A changed number is written at once: status.permits is what wakes the lock's waiters once
	// Redis has the number (see wakeOnPermits), so it must not wait for the write interval.
	if wait := r.writeWait(id); wait > 0 && status.Permits == int32(admitted) {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	base := obj.DeepCopyObject().(client.Object)
	before := status.DeepCopy()
	status.ObservedGeneration = obj.GetGeneration()
	readErr := r.read(ctx, status, key, namespace, permitsIn(obj), admitted)
	status.ObservedAt = before.ObservedAt
	if equality.Semantic.DeepEqual(before, status) {
		return reconcile.Result{RequeueAfter: r.Resync}, readErr
	}
	status.ObservedAt = &metav1.Time{Time: r.Clock.Now().Truncate(time.Second)}
	if err := r.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("record the view of lock %s: %w", key, err)
	}
	r.wrote(id)
	return reconcile.Result{RequeueAfter: r.Resync}, readErr
}

// read fills status from Redis: the holder with its fence, and the queue. On a failed read only the
// RedisAvailable condition changes, so the last view stays visible.
func (r *LockViewReconciler) read(ctx context.Context, status *batchv1alpha1.LockViewStatus, key, namespace string, permits, admitted int) error {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	defer cancel()
	slots, err := r.Locks.Slots(rctx, key)
	if err != nil {
		r.setRedis(status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, fmt.Sprintf("Redis unavailable: %v", err))
		return fmt.Errorf("inspect %s: %w", key, err)
	}
	status.LockKey = r.Locks.RedisKey(key)
	status.Permits = int32(admitted)
	status.LastFencingToken = 0
	before := status.Holders
	status.Holders = nil
	for slot, st := range slots {
		status.LastFencingToken = max(status.LastFencingToken, st.Fence)
		if st.Held {
			status.Holders = append(status.Holders, r.holder(ctx, st.Metadata, st.Fence, int32(slot), namespace))
		}
	}
	if h := handoff(before, status.Holders, r.Clock.Now()); h != nil {
		status.LastHandoff = h
	}
	status.InUse = int32(len(status.Holders))
	r.setPermitsSupported(status, permits)
	status.Waiting, status.Head = nil, ""
	if r.Locks.HandsOff() {
		q, err := r.Locks.QueueState(rctx, key)
		if err != nil {
			r.setRedis(status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, fmt.Sprintf("Redis unavailable: %v", err))
			return fmt.Errorf("queue of %s: %w", key, err)
		}
		waiting := int32(q.Waiting)
		status.Waiting, status.Head = &waiting, q.Head
	}
	r.setRedis(status, metav1.ConditionTrue, batchv1alpha1.ReasonRedisOK, "Redis answered")
	return nil
}

// setPermitsSupported says whether Redis can grant the permits the lock declares.
func (r *LockViewReconciler) setPermitsSupported(status *batchv1alpha1.LockViewStatus, permits int) {
	s, reason, msg := metav1.ConditionTrue, batchv1alpha1.ReasonPermitsSupported, fmt.Sprintf("Redis admits %d holders of this lock at once", permits)
	behind := r.olderClients()
	switch {
	case permits > 1 && !r.Locks.HandsOff():
		s, reason = metav1.ConditionFalse, batchv1alpha1.ReasonPermitsUnsupported
		msg = fmt.Sprintf("spec.permits is %d, and the operator's Redis is Redlock, which admits one holder per lock: the lock's LockedJobs wait until spec.permits is 1", permits)
	case permits > 1 && len(behind) > 0:
		s, reason = metav1.ConditionFalse, batchv1alpha1.ReasonOlderOperators
		msg = fmt.Sprintf("spec.permits is %d, but %s shares this Redis and speaks lock protocol %d, which would not honour them (%d needed): the lock admits one holder until it is upgraded or gone",
			permits, behind[0].Member, behind[0].Protocol, redislock.SemaphoreProtocol)
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batchv1alpha1.ConditionPermitsSupported, Status: s, Reason: reason, Message: cutMessage(msg),
		ObservedGeneration: status.ObservedGeneration, LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}

// handoff is the lock passing from a holder of before that is gone to the newest holder of now that
// was not in before (for a semaphore, from the one that left the newcomer's slot, if it did); nil
// when no holder left or none came. A holder of another cluster has no
// acquiredAt here: it came when it was read (now).
func handoff(before, now []batchv1alpha1.LockHolder, at time.Time) *batchv1alpha1.LockHandoff {
	held := func(hs []batchv1alpha1.LockHolder, h batchv1alpha1.LockHolder) bool {
		return slices.ContainsFunc(hs, func(o batchv1alpha1.LockHolder) bool { return o.Holder == h.Holder })
	}
	var from, to *batchv1alpha1.LockHolder
	for i := range now {
		if !held(before, now[i]) && (to == nil || acquiredAt(now[i], at).After(acquiredAt(*to, at))) {
			to = &now[i]
		}
	}
	if to == nil {
		return nil
	}
	// Of a semaphore's holders that left, the one of the newcomer's slot passed it on.
	for i := range before {
		if !held(now, before[i]) && (from == nil || before[i].Slot == to.Slot) {
			from = &before[i]
		}
	}
	if from == nil {
		return nil
	}
	return &batchv1alpha1.LockHandoff{From: cmp.Or(from.LockedJob, from.Holder), To: cmp.Or(to.LockedJob, to.Holder),
		At: metav1.Time{Time: acquiredAt(*to, at).Truncate(time.Second)}}
}

func acquiredAt(h batchv1alpha1.LockHolder, otherwise time.Time) time.Time {
	if h.AcquiredAt == nil {
		return otherwise
	}
	return h.AcquiredAt.Time
}

// holder describes the holder named holderName. A holder of this cluster is named by its
// LockedJob (and, if the cache has it holding, when it acquired); another cluster's only by name.
func (r *LockViewReconciler) holder(ctx context.Context, holderName string, fence int64, slot int32, namespace string) batchv1alpha1.LockHolder {
	h := batchv1alpha1.LockHolder{Holder: holderName, FencingToken: fence, Slot: slot}
	parts := strings.SplitN(holderName, "/", 4)
	if len(parts) != 4 || parts[0] != r.Identity.ClusterID {
		return h
	}
	ljNamespace, ljName := parts[1], parts[2]
	switch namespace {
	case "":
		h.LockedJob = ljNamespace + "/" + ljName
	case ljNamespace:
		h.LockedJob = ljName
	default:
		return h // a Namespace-scope key names its namespace: another one cannot hold it
	}
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ljNamespace, Name: ljName}, lj); err == nil && lj.Status.Holder == holderName {
		h.AcquiredAt = lj.Status.AcquiredAt
	}
	return h
}

func (r *LockViewReconciler) setRedis(status *batchv1alpha1.LockViewStatus, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batchv1alpha1.ConditionRedisAvailable, Status: s, Reason: reason, Message: cutMessage(msg),
		ObservedGeneration: status.ObservedGeneration, LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}

// writeWait is how long the view of id must wait before its next status write.
func (r *LockViewReconciler) writeWait(id types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.written[id]
	if !ok {
		return 0
	}
	return max(r.MinInterval-r.Clock.Since(last), 0)
}

func (r *LockViewReconciler) wrote(id types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written[id] = r.Clock.Now()
}

// forget drops what is known of a deleted object, so a new one of the same name starts afresh.
func (r *LockViewReconciler) forget(id types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.written, id)
}
