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

package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

const (
	// finalizer keeps a LockedJob until its lock is released and its Job's pods are gone.
	finalizer = "batch.lockedjob.dev/release-lock"

	defaultTTL = 30 * time.Second
	// conflictRequeue is how soon a pass whose write lost an optimistic-lock race runs again, with
	// the object as the API server has it now.
	conflictRequeue = 50 * time.Millisecond
	// maxStepsPerPass bounds the steps one pass chains (add the finalizer → acquire → create the
	// Job → running is the longest).
	maxStepsPerPass = 5
)

// Config is the operator-wide behaviour of the reconciler.
type Config struct {
	// Identity derives lock keys, holder names and tokens.
	Identity Identity
	// ClusterScopeNamespaces may acquire locks of spec.lock.scope Cluster; "*" allows every namespace.
	ClusterScopeNamespaces []string
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
}

func (c *Config) defaults() {
	if c.WaitBackoffMin <= 0 {
		c.WaitBackoffMin = time.Second
	}
	if c.WaitBackoffMax < c.WaitBackoffMin {
		c.WaitBackoffMax = max(15*time.Second, c.WaitBackoffMin)
	}
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = 2 * time.Second
	}
	if c.QueueRecheck <= 0 {
		c.QueueRecheck = 20 * c.WaitBackoffMax
	}
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
	Locks     *LockBook
	Config    Config
	Clock     clock.PassiveClock

	waiting waitBook
}

// pass is one run of Reconcile: the object as read, what it observed, and the status it records.
type pass struct {
	lj     *batchv1alpha1.LockedJob
	before *batchv1alpha1.LockedJob // what the API server has: base of the status patch
	key    string                   // the lock's name in the lock library
	obs    observation
	// acquired tells the acquisition made by this pass; the JobCreated Event that follows in the
	// same pass carries it, so one Event tells both (they always come together).
	acquired string
}

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get,resourceNames=kube-system

// Reconcile observes the LockedJob, its lock and its Job, decides the next step of the state
// machine (see decide), acts, and records status in one optimistic patch at the end.
func (r *LockedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, req.NamespacedName, lj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: whatever the book still knows of it (a pass that raced the last one) is moot.
			r.Locks.ForgetObject(req.NamespacedName)
			r.waiting.doneObject(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("LockedJob", klog.KObj(lj))
	ctx = ctrl.LoggerInto(ctx, log)

	p := &pass{lj: lj, before: lj.DeepCopy(), key: r.lockName(lj)}
	if err := r.observe(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		raced, err := r.record(ctx, p, reterr)
		if err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		if raced && reterr == nil {
			result = ctrl.Result{RequeueAfter: conflictRequeue} // run again on the current object
		}
	}()

	var (
		res  ctrl.Result
		err  error
		next bool
	)
	for range maxStepsPerPass {
		st := decide(p.obs)
		log.V(1).Info("Reconciling", "step", st.String())
		res, next, err = r.act(ctx, p, st)
		if err != nil || !next {
			break
		}
	}
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	}
	return res, err
}

// act carries out one step. next reports that the step changed what the pass observed and the
// state machine should decide again in the same pass.
func (r *LockedJobReconciler) act(ctx context.Context, p *pass, st step) (res ctrl.Result, next bool, err error) {
	switch st {
	case stepIdle:
		return ctrl.Result{}, false, nil
	case stepAddFinalizer:
		if err := r.addFinalizer(ctx, p); err != nil {
			return ctrl.Result{}, false, err
		}
		// Go on in this pass: waiting for the finalizer's own update event put every LockedJob of a
		// burst behind the finalizers of all the others before its first Job.
		p.before, p.obs.hasFinalizer = p.lj.DeepCopy(), true
		return ctrl.Result{}, true, nil
	case stepForget:
		r.Locks.Forget(p.lj.UID)
		r.waiting.done(r.Config.Identity.Holder(p.lj))
		return ctrl.Result{}, false, r.letGo(ctx, p)
	case stepReleaseAfterEnd:
		res, err = r.releaseAfterEnd(ctx, p)
		return res, false, err
	case stepLoseLock:
		return ctrl.Result{}, false, r.loseLock(ctx, p, p.obs.lost)
	case stepFinish:
		return ctrl.Result{}, false, r.finish(ctx, p)
	case stepReadopt:
		return r.readopt(ctx, p)
	case stepJobGone:
		res, err = r.jobGone(ctx, p)
		return res, false, err
	case stepScopeNotAllowed:
		r.markScopeNotAllowed(p)
		return ctrl.Result{}, false, nil // the user must act; retrying changes nothing
	case stepAcquire:
		return r.acquire(ctx, p)
	case stepCreateJob:
		return r.createJob(ctx, p)
	case stepRunning:
		r.recordRunning(p)
		// A pod's waiting reason changes without the Job changing: look again soon while no pod is
		// ready, so a missing image shows in status within seconds. Otherwise a running Job needs no
		// pass until something changes: the Job (watched), or the lock (the keeper reports a loss).
		if mayBeStuck(p.obs.job) {
			// At the usual priority, not the urgent one of the handoff that started this Job.
			return ctrl.Result{RequeueAfter: stuckRecheck, Priority: ptr.To(0)}, false, nil
		}
		return ctrl.Result{}, false, nil
	case stepDeleteReadopt:
		return r.deleteReadopt(ctx, p)
	case stepDeleteJob:
		return r.deleteJob(ctx, p)
	case stepDeleteRelease:
		res, err = r.deleteRelease(ctx, p)
		return res, false, err
	}
	return ctrl.Result{}, false, fmt.Errorf("unknown step %d", st)
}

// observe fills p.obs: the object's own record, the lock book, and the Job. A Job that the cache
// does not have is looked up on the API server before anything is decided, so a Job that was just
// created (or is about to be stopped) is never taken for a missing one.
func (r *LockedJobReconciler) observe(ctx context.Context, p *pass) error {
	lj := p.lj
	book := r.Locks.recordOf(lj.UID)
	p.obs = observation{
		deleting:     !lj.DeletionTimestamp.IsZero(),
		hasFinalizer: controllerutil.ContainsFinalizer(lj, finalizer),
		terminal:     isTerminal(lj.Status.Phase),
		lockRecorded: conditionTrue(lj, batchv1alpha1.ConditionLockAcquired),
		scopeAllowed: lj.Spec.Lock.Scope != batchv1alpha1.LockScopeCluster || r.clusterScopeAllowed(lj.Namespace),
		holding:      book.lock,
		lost:         book.lost,
		released:     book.released,
		jobCreated:   lj.Status.JobUID != "",
	}
	name := lj.Status.JobName
	if name == "" {
		name = book.job // a stale object may lack what an earlier pass recorded
	}
	if name == "" {
		return nil
	}
	job, err := r.findJob(ctx, lj, name)
	if err != nil {
		return err
	}
	p.obs.job = job
	if job != nil && lj.Status.JobUID == "" {
		lj.Status.JobName, lj.Status.JobUID = job.Name, job.UID
		p.obs.jobCreated = true
	}
	// Pods are listed only once the Job has had stuckRecheck to start them: a pod that starts in
	// seconds, as nearly all do, costs no LIST (which the API server answers by scanning the pods
	// of the namespace, thousands of them under a burst).
	if job != nil && mayBeStuck(job) && r.Clock.Since(job.CreationTimestamp.Time) >= stuckRecheck {
		p.obs.stuck = r.stuckPod(ctx, job)
	}
	return nil
}

// findJob reads the named Job of this LockedJob from the cache, else from the API server. It
// returns nil when neither has it; a Job of that name that this LockedJob does not control is an
// error, never adopted.
func (r *LockedJobReconciler) findJob(ctx context.Context, lj *batchv1alpha1.LockedJob, name string) (*batchv1.Job, error) {
	key := client.ObjectKey{Namespace: lj.Namespace, Name: name}
	job := &batchv1.Job{}
	err := r.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, job)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", name, err)
	}
	if !metav1.IsControlledBy(job, lj) {
		return nil, fmt.Errorf("job %s exists and does not belong to this LockedJob", name)
	}
	return job, nil
}

// record is the one status write at the end of a pass, with optimistic locking: a pass that read a
// stale LockedJob must not overwrite what a later pass recorded. observedGeneration moves only when
// the pass succeeded; nothing is written when nothing changed.
// raced reports a write that lost to a newer version of the object.
func (r *LockedJobReconciler) record(ctx context.Context, p *pass, reterr error) (raced bool, err error) {
	if !p.obs.hasFinalizer && !p.obs.deleting {
		return false, nil // the finalizer pass writes metadata only
	}
	if p.obs.deleting && !controllerutil.ContainsFinalizer(p.lj, finalizer) {
		return false, nil // this pass let the object go: there is nobody left to read its status
	}
	if reterr == nil {
		p.lj.Status.ObservedGeneration = p.lj.Generation
	}
	setReady(p.lj)
	if equality.Semantic.DeepEqual(p.before.Status, p.lj.Status) {
		return false, nil
	}
	err = r.Status().Patch(ctx, p.lj, client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		return true, nil
	}
	return false, err
}

// recordNow writes status at once (before the Job is created) with optimistic locking and moves the
// patch base, so the final write carries only what changes after it. A conflict means another pass
// or writer got there first: the Job is not created on a stale view.
func (r *LockedJobReconciler) recordNow(ctx context.Context, p *pass) error {
	p.lj.Status.ObservedGeneration = p.lj.Generation
	setReady(p.lj)
	if err := r.Status().Patch(ctx, p.lj, client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record lock in status: %w", err)
	}
	p.before = p.lj.DeepCopy()
	return nil
}

// addFinalizer stores the finalizer before anything is acquired, with optimistic locking so a
// stale pass cannot drop another controller's finalizer.
func (r *LockedJobReconciler) addFinalizer(ctx context.Context, p *pass) error {
	base := p.lj.DeepCopy()
	controllerutil.AddFinalizer(p.lj, finalizer)
	if err := r.Patch(ctx, p.lj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// letGo removes the finalizer of a finished LockedJob that holds no lock and has no Job that may
// still run: the finalizer guards a lock and the pods under it, and this one has neither, so its
// deletion needs no pass of the operator (deleting 1,000 finished LockedJobs waited for 1,000
// passes). A Job left running (spec.lock.onLockLost Ignore, or a suspended one) keeps the
// finalizer, and deletion stops it as before.
func (r *LockedJobReconciler) letGo(ctx context.Context, p *pass) error {
	if job := p.obs.job; job != nil && !jobFinished(job) {
		return nil
	}
	return r.removeFinalizer(ctx, p)
}

func (r *LockedJobReconciler) removeFinalizer(ctx context.Context, p *pass) error {
	base := p.lj.DeepCopy()
	controllerutil.RemoveFinalizer(p.lj, finalizer)
	if err := r.Patch(ctx, p.lj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
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
	r.Locks.SetHandlers(func(lj *batchv1alpha1.LockedJob, err error) {
		r.event(lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRenewFailed, "Renew",
			"Renewing the lock failed (%v); retrying until the lease runs out", err)
	}, r.stopWorkload)
	// The book acts on losses only while this manager leads; before the election and after a lost
	// one it only renews (a process that builds a new manager keeps its book).
	if err := mgr.Add(r.Locks.Leadership()); err != nil {
		return fmt.Errorf("add lock book leadership: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &batchv1alpha1.LockedJob{}, indexLockKey, func(o client.Object) []string {
		return []string{o.(*batchv1alpha1.LockedJob).Status.LockKey}
	}); err != nil {
		return fmt.Errorf("index %s: %w", indexLockKey, err)
	}
	// A waiter's queue member is its holder name, derived from the object, not read from status.
	if err := mgr.GetFieldIndexer().IndexField(ctx, &batchv1alpha1.LockedJob{}, indexQueueMember, func(o client.Object) []string {
		return []string{r.Config.Identity.Holder(o.(*batchv1alpha1.LockedJob))}
	}); err != nil {
		return fmt.Errorf("index %s: %w", indexQueueMember, err)
	}
	handed, moved := make(chan event.GenericEvent, 256), make(chan event.GenericEvent, 256)
	waker := &releaseWaker{redis: r.Locks.Redis(), identity: r.Config.Identity, reader: mgr.GetClient(), waiting: &r.waiting,
		handed: handed, moved: moved, timeout: r.Config.RedisTimeout}
	keeper := &queueKeeper{redis: r.Locks.Redis(), waiting: &r.waiting, liveness: r.Config.waiterLiveness(),
		timeout: r.Config.RedisTimeout, wake: handed}
	for _, runnable := range []manager.Runnable{waker, keeper} {
		if err := mgr.Add(runnable); err != nil {
			return err
		}
	}
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batchv1alpha1.LockedJob{}, handler.OnlyControllerOwner())
	return ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.LockedJob{}).
		Watches(&batchv1.Job{}, jobEndedFirst(owner)).
		WatchesRawSource(source.Channel(r.Locks.Events(), enqueueAt(priorityUrgent))).
		WatchesRawSource(source.Channel(handed, enqueueAt(priorityUrgent))).
		WatchesRawSource(source.Channel(moved, enqueueAt(0))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Config.MaxConcurrentReconciles, 1)}).
		Named("lockedjob").
		Complete(r)
}

// jobEndedFirst passes Job events to the owning LockedJob, ahead of other work when the Job just
// finished: that pass releases the lock and hands it to the next waiter.
func jobEndedFirst(owner handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  owner.Create,
		DeleteFunc:  owner.Delete,
		GenericFunc: owner.Generic,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ended(e.ObjectNew) && !ended(e.ObjectOld) {
				q = atPriority(q, priorityJobEnded)
			}
			owner.Update(ctx, e, q)
		},
	}
}

func ended(o client.Object) bool {
	job, ok := o.(*batchv1.Job)
	return ok && jobFinished(job)
}

func (r *LockedJobReconciler) clusterScopeAllowed(ns string) bool {
	return slices.Contains(r.Config.ClusterScopeNamespaces, "*") || slices.Contains(r.Config.ClusterScopeNamespaces, ns)
}

func (r *LockedJobReconciler) event(lj *batchv1alpha1.LockedJob, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(lj, nil, eventType, reason, action, note, args...)
	}
}
