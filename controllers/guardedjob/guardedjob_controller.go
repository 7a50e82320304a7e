// Package guardedjob is the reconciler of guarded Jobs (docs/design.md, "Guarded Jobs and Pods
// (issue 22): the controller"): plain batch/v1 Jobs labelled batch.lockedjob.dev/lock, which the
// admission gate (config/guard) creates suspended. It acquires the Job's lock through the lock
// book, under the rules of internal/locks that the LockedJob reconciler follows too (one key, one
// queue, one fencing sequence per lock name and scope), unsuspends the Job with the fence in its
// pod template, and releases the lock once the Job's pods are gone.
package guardedjob

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

const (
	finalizer = guard.Finalizer
	// maxStepsPerPass bounds the steps one pass chains (acquire → unsuspend is the longest; a
	// re-adoption that finds the lock lost goes on to lose it).
	maxStepsPerPass = 4
	// podRecheck is how soon a pass that waits for a Job's pods to stop looks again: a pod's end
	// does not change the Job until the Job controller counts it.
	podRecheck = time.Second
)

// Config is the operator-wide behaviour of the reconciler, that of every guard reconciler.
type Config = guard.Config

// GuardedJobReconciler reconciles a guarded Job: it acquires the lock, unsuspends the Job under it,
// and releases the lock when the Job ends or is deleted.
type GuardedJobReconciler struct {
	// Client writes (merge patches, deletes) to the API server. Jobs are read from Jobs, never
	// through Client: the manager's cache keeps only the operator's own Jobs.
	Client client.Client
	// Jobs is the cache of guarded Jobs (NewCache), which the per-lock view watches too; when nil,
	// SetupWithManager makes it and adds it to the manager.
	Jobs cache.Cache
	// APIReader reads uncached: pods, and a Job the cache does not have (yet).
	APIReader client.Reader
	// Pods reads the pods of the Jobs it unsuspended from the reconciler's own cache
	// (sreconcile.NewPodCache, selected by guardedPods), which SetupWithManager makes; when nil, a
	// lock waits for the Job's condition.
	Pods     client.Reader
	Recorder events.EventRecorder
	Locks    *lockbook.Book
	Config   Config
	Clock    clock.PassiveClock

	permits locks.PermitReader
	// waiting is the wait book of this reconciler's waiters (guard.Holdings.Asks and Wait).
	waiting waitbook.Book
}

// pass is one run of Reconcile: the Job as read and what the pass knows of its lock.
type pass struct {
	job *batchv1.Job
	// claimant is who the Job is to the lock; claim names the lock for the book, computed once.
	claimant locks.Claimant
	claim    lockbook.Claim
	obs      observation
	// acquired tells the acquisition of this pass; the unsuspend Event that follows carries it.
	acquired string
	// drift says how the label or annotations of a held Job differ from the lock it holds.
	drift string
}

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the guarded Job and its lock, decides the next step (see decide), and acts.
// Every write is an optimistic merge patch of the Job itself: there is no object of ours.
func (r *GuardedJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job, err := r.getJob(ctx, req.NamespacedName)
	if err != nil || job == nil {
		if job == nil && err == nil {
			r.Locks.ForgetObject(locks.KindJob, req.NamespacedName)
			r.waiting.DoneObject(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Job", klog.KObj(job))
	ctx = ctrl.LoggerInto(ctx, log)

	p, err := r.observe(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if p.drift != "" {
		r.event(job, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Reconcile", "%s", p.drift)
	}
	return sreconcile.Steps(ctx, maxStepsPerPass,
		func() step { return decide(p.obs) },
		func(ctx context.Context, st step) (ctrl.Result, bool, error) { return r.act(ctx, p, st) })
}

// getJob reads the guarded Job from the reconciler's cache, else from the API server (a Job just
// created may not be cached yet); nil when neither has it or it is no guarded Job.
func (r *GuardedJobReconciler) getJob(ctx context.Context, key client.ObjectKey) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	if ok, err := guard.Get(ctx, r.Jobs, r.APIReader, key, job, locks.IsGuardedJob); !ok || err != nil {
		return nil, err
	}
	return job, nil
}

// SetupWithManager wires the reconciler: guarded Jobs from a cache of their own, lost-lock events
// from the book and release wake-ups from Redis. It may be called again with a new manager after
// the previous one lost its leadership: everything it registers belongs to the manager, and the
// book's handlers are replaced.
func (r *GuardedJobReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.Config.Defaults()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Jobs == nil {
		jobs, err := NewCache(mgr)
		if err != nil {
			return err
		}
		if err := mgr.Add(jobs); err != nil {
			return fmt.Errorf("add guarded job cache: %w", err)
		}
		r.Jobs = jobs
	}
	jobs := r.Jobs
	if err := indexLockKey(ctx, jobs, r.Config.Identity, r.Locks); err != nil {
		return err
	}
	pods, err := sreconcile.NewPodCache(ctx, mgr, "guarded job", guardedPods())
	if err != nil {
		return err
	}
	r.Pods = pods
	r.permits = sreconcile.PermitReader(mgr)
	return guard.Complete(mgr, &batchv1.Job{}, guard.Wiring{
		Name: "guardedjob", Locks: r.Locks, Identity: r.Config.Identity, Kind: locks.KindJob, Objects: jobs,
		Named: namedJob, Waiters: r.waiters, Stop: r.stopWorkload,
		Waiting: &r.waiting, Config: &r.Config,
		Sources: []source.Source{source.Kind(pods, &corev1.Pod{}, sreconcile.JobOfSucceededPod())},
		Permits: r.permits, Workers: r.Config.MaxConcurrentReconciles,
	}, r)
}

// event emits an Event on the Job with its note cut (sreconcile.CutMessage).
func (r *GuardedJobReconciler) event(job *batchv1.Job, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(job, nil, eventType, reason, action, "%s", sreconcile.CutMessage(fmt.Sprintf(note, args...)))
	}
}

// holdings re-adopts and releases through the book (guard.Holdings).
func (r *GuardedJobReconciler) holdings() guard.Holdings {
	return guard.Holdings{Locks: r.Locks, Permits: r.permits, Config: &r.Config, Waiting: &r.waiting}
}
