/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package lockedjob

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

const (
	finalizer = batchv1alpha1.FinalizerReleaseLock

	defaultTTL = batchv1alpha1.DefaultLockTTL // for objects stored before the CRD defaulted spec.lock.ttl
	// maxStepsPerPass bounds the steps one pass chains (add the finalizer → acquire → create the
	// Job → running is the longest).
	maxStepsPerPass = 5
)

// Config is the operator-wide behaviour of the reconciler.
type Config struct {
	// Identity derives lock keys, holder names and tokens.
	Identity locks.Identity
	// ClusterScopeNamespaces may acquire locks of spec.lock.scope Cluster; "*" allows every namespace.
	// The LockedCronJob reconciler must be given the same gate.
	ClusterScopeNamespaces locks.ScopeGate
	// WaitBackoffMin and WaitBackoffMax bound the jittered re-check of a LockedJob at the head of its
	// queue (or without a queue that hands off), the safety net behind release wake-ups and the way
	// to notice a lock freed by an expiry. Defaults 1s and 15s.
	WaitBackoffMin, WaitBackoffMax time.Duration
	// QueueRecheck is how often a LockedJob behind the head of its queue asks Redis again (jittered,
	// default 20 × WaitBackoffMax, 5 minutes): handoffs tell it its new place without a call, the
	// queue keeper keeps it queued, and a head that leaves a free lock hands it on, so this only
	// catches what nothing announces (the places behind a waiter that left).
	QueueRecheck time.Duration
	// MaxConcurrentReconciles is how many LockedJobs are reconciled at once (default 1).
	MaxConcurrentReconciles int
	// RedisTimeout bounds every Redis call of a pass (default 2s), so a Redis that stopped answering
	// cannot hold every worker while a lost lock waits to be acted on.
	RedisTimeout time.Duration
	// FailoverTime is how long a successor operator may take to re-adopt the locks of one that died
	// (the leader-election lease). A LockedJob whose ttl is shorter gets a warning Event: its lock
	// expires before a successor can renew it.
	FailoverTime time.Duration
	// LegacyLockKeys makes an acquisition wait while the lock is held under the key layout of an
	// earlier version (namespace keys without the cluster ID). Turn it off once no LockedJob that
	// acquired before the upgrade is left.
	LegacyLockKeys bool
	// UnwatchedJobRecheck is how often a running LockedJob looks at a Job the cache does not follow
	// (its label was taken away; see CacheOptions), default 30s: the longest its lock outlives such a
	// Job's end.
	UnwatchedJobRecheck time.Duration
}

func (c *Config) defaults() {
	if c.WaitBackoffMin <= 0 {
		c.WaitBackoffMin = time.Second
	}
	if c.WaitBackoffMax < c.WaitBackoffMin {
		c.WaitBackoffMax = max(15*time.Second, c.WaitBackoffMin)
	}
	c.RedisTimeout = reconcile.DurationOr(c.RedisTimeout, 2*time.Second)
	if c.QueueRecheck <= 0 {
		c.QueueRecheck = 20 * c.WaitBackoffMax
	}
	c.UnwatchedJobRecheck = reconcile.DurationOr(c.UnwatchedJobRecheck, 30*time.Second)
}

// stuckRecheck is how often a running LockedJob without a ready pod looks for a stuck one.
const stuckRecheck = 5 * time.Second

// waiterLiveness is how long a waiter stays queued in Redis when nobody keeps it: the queue keeper
// renews it every third of that, and the head's backoff stays well inside it, so only a waiter
// whose operator stopped drops out.
func (c *Config) waiterLiveness() time.Duration { return 4*c.WaitBackoffMax + 30*time.Second }

// LockedJobReconciler reconciles a LockedJob: it acquires the lock, runs the Job under it, and
// releases the lock when the Job ends or the LockedJob is deleted.
type LockedJobReconciler struct {
	client.Client
	// APIReader reads uncached: the Job when the cache does not have it (yet), and pod metadata.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Locks     *lockbook.Book
	Config    Config
	Clock     clock.PassiveClock
	// Pods reads the pods of the operator's Jobs from the reconciler's own cache (reconcile.NewPodCache),
	// which SetupWithManager makes.
	Pods client.Reader

	waiting waitbook.Book
	permits locks.PermitReader
}

// pass is one run of Reconcile: the object as read, what it observed, and the status it records.
type pass struct {
	lj     *batchv1alpha1.LockedJob
	before *batchv1alpha1.LockedJob // what the API server has: base of the status patch
	// claim names the lock for the book: its key, the LockedJob's token and holder name, computed
	// once when the pass starts (they do not change within it). lockClaim adds what may.
	claim lockbook.Claim
	// permits is how many may hold the lock at once (see locks.PermitReader), read by the passes
	// that acquire; 0 in the others.
	permits int
	obs     observation
	// acquired tells the acquisition made by this pass; the JobCreated Event that follows in the
	// same pass carries it, so one Event tells both (they always come together).
	acquired string
}

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the LockedJob, its lock and its Job, decides the next step of the state
// machine (see decide), acts, and records status in one optimistic patch at the end.
func (r *LockedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, req.NamespacedName, lj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: whatever the book still knows of it (a pass that raced the last one) is moot.
			r.Locks.ForgetObject(locks.KindLockedJob, req.NamespacedName)
			r.waiting.DoneObject(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("LockedJob", klog.KObj(lj))
	ctx = ctrl.LoggerInto(ctx, log)

	p := &pass{lj: lj, before: lj.DeepCopy(), claim: r.claimOf(lj)}
	if err := r.observe(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		raced, err := r.record(ctx, p, reterr)
		if err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		if raced && reterr == nil {
			result = ctrl.Result{RequeueAfter: reconcile.ConflictRequeue} // run again on the current object
		}
	}()

	return reconcile.Steps(ctx, maxStepsPerPass,
		func() step { return decide(p.obs) },
		func(ctx context.Context, st step) (ctrl.Result, bool, error) { return r.act(ctx, p, st) })
}

// SetupWithManager wires the reconciler: LockedJobs, the Jobs they own, lost-lock events from the
// keeper and release wake-ups from Redis. It may be called again with a new manager after the
// previous one lost its leadership: everything it registers belongs to the manager, and the book's
// handlers are replaced.
func (r *LockedJobReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.Config.defaults()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.Locks.SetHandlers(locks.KindLockedJob, lockbook.Handlers{OnRenewFailed: r.tellRenewFailed, StopWorkload: r.stopWorkload})
	if err := indexForWakeups(ctx, mgr.GetFieldIndexer(), r.Config.Identity); err != nil {
		return err
	}
	handed, moved := make(chan event.GenericEvent, 256), make(chan event.GenericEvent, 256)
	waker := &releaseWaker{locks: r.Locks, identity: r.Config.Identity, reader: mgr.GetClient(), waiting: &r.waiting,
		handed: handed, moved: moved, timeout: r.Config.RedisTimeout}
	r.waiting.Count = lockedJobsWaiting
	keeper := &waitbook.Keeper{Locks: r.Locks, Waiting: &r.waiting, Liveness: r.Config.waiterLiveness(),
		Timeout: r.Config.RedisTimeout, Named: namedLockedJob, Wake: handed}
	for _, runnable := range []manager.Runnable{waker, keeper} {
		if err := mgr.Add(runnable); err != nil {
			return err
		}
	}
	pods, err := r.podCache(ctx, mgr)
	if err != nil {
		return err
	}
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batchv1alpha1.LockedJob{}, handler.OnlyControllerOwner())
	b := ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.LockedJob{}).
		Watches(&batchv1.Job{}, jobEndedFirst(owner)).
		WatchesRawSource(source.Kind(pods, &corev1.Pod{}, podSucceededFirst())).
		WatchesRawSource(source.Channel(r.Locks.Events(locks.KindLockedJob), enqueueAt(priorityUrgent))).
		WatchesRawSource(source.Channel(handed, enqueueAt(priorityUrgent))).
		WatchesRawSource(source.Channel(moved, enqueueAt(0)))
	r.permits = reconcile.PermitReader(mgr)
	b = reconcile.WakeOnPermits(b, r.permits, r.waitersOfLock)
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Config.MaxConcurrentReconciles, 1)}).
		Named("lockedjob").
		Complete(r)
}

// podCache makes the cache of the operator's pods (reconcile.NewPodCache, selected by the label
// buildJob puts in the pod template), and reads pods from it.
func (r *LockedJobReconciler) podCache(ctx context.Context, mgr ctrl.Manager) (cache.Cache, error) {
	pods, err := reconcile.NewPodCache(ctx, mgr, "lockedjob", ownJobs())
	if err != nil {
		return nil, err
	}
	r.Pods = pods
	return pods, nil
}

// tellRenewFailed is how the lock book tells the user, through an Event on the LockedJob, of a
// renewal that failed or of a lease too short for the round trip to Redis.
func (r *LockedJobReconciler) tellRenewFailed(w lockbook.Workload, err error) {
	lj := lockedJobOf(w)
	if errors.Is(err, lockbook.ErrLeaseTooShort) {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonTTLBelowRoundTrip, "Renew",
			"spec.lock.ttl is too short for the round trip to Redis (%v): a renewal may not be answered before the lease is at risk; raise spec.lock.ttl", err)
		return
	}
	r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRenewFailed, "Renew",
		"Renewing the lock failed (%v); retrying until the lease runs out", err)
}

// event emits an Event with its note cut (reconcile.CutMessage): the events API refuses a longer one.
func (r *LockedJobReconciler) event(lj *batchv1alpha1.LockedJob, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(lj, nil, eventType, reason, action, "%s", reconcile.CutMessage(fmt.Sprintf(note, args...)))
	}
}
