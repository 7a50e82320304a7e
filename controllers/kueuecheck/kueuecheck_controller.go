// Package kueuecheck answers for Kueue's AdmissionChecks of controller batch.lockedjob.dev/lock
// (docs/design.md, "Kueue"): a Job that carries both kueue.x-k8s.io/queue-name and
// batch.lockedjob.dev/lock is suspended and unsuspended by Kueue alone, and its Workload is
// admitted only once the check is Ready. The reconciler acquires the Job's lock through the lock
// book, under the rules of internal/locks that guarded Jobs and LockedJobs follow (one key, one
// queue, one fencing sequence per lock name and scope), records the hold on the Job, and only then
// sets the check Ready with the fence in podSetUpdates, which Kueue writes into the pod template as
// it unsuspends the Job. A lost lock sets the check Retry (Kueue evicts, suspends the Job and takes
// the fence out); the lock is released once the Job ended, was evicted or deleted, and its pods
// stopped. A labelled Job that Kueue admits without our check (its ClusterQueue lists none) runs
// without the lock: it is marked Unguarded, as a guarded Job that someone else unsuspended.
package kueuecheck

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
	// bookKind files this reconciler's workloads in the lock book apart from the guarded-Job
	// reconciler's: both hold as Jobs (holder job:<name>), but each stops and wakes its own.
	bookKind locks.Kind = "KueueJob"
	// maxStepsPerPass bounds the steps one pass chains (acquire → record → admit is the longest).
	maxStepsPerPass = 4
	// podRecheck is how soon a pass that waits for a Job's pods to stop looks again.
	podRecheck = time.Second
)

// Config is the operator-wide behaviour of the reconciler, that of every guard reconciler.
type Config = guard.Config

// KueueCheckReconciler reconciles a Job that Kueue admits under our AdmissionCheck: it acquires
// the lock, lets Kueue admit the Job under it, and releases it when the Job no longer runs.
type KueueCheckReconciler struct {
	// Client writes: merge patches of the Job's annotations and the Workload's status.
	Client client.Client
	// Jobs is the cache of labelled Jobs (guardedjob.NewCache), shared with the guarded-Job
	// reconciler and the per-lock view; this reconciler acts on locks.IsKueueGuardedJob only.
	Jobs cache.Cache
	// Kueue reads Workloads and AdmissionChecks (the manager's cache).
	Kueue client.Reader
	// APIReader reads uncached: pods, and a Job the cache does not have (yet).
	APIReader client.Reader
	// Pods reads the pods of the Jobs Kueue admitted under our check from the reconciler's own
	// cache (sreconcile.NewPodCache, selected by kueuePods), which SetupWithManager makes; when nil,
	// a lock waits for its Job's condition.
	Pods     client.Reader
	Recorder events.EventRecorder
	Locks    *lockbook.Book
	Config   Config
	Clock    clock.PassiveClock

	permits locks.PermitReader
	waiting waitbook.Book
}

// pass is one run of Reconcile: the Job and its Workload as read, and what the pass knows of the
// lock.
type pass struct {
	job      *batchv1.Job
	workload *unstructured.Unstructured // nil if none
	check    string                     // the name of our check on the Workload ("" if none)
	claimant locks.Claimant
	claim    lockbook.Claim
	obs      observation
}

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=patch;update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks/status,verbs=patch;update

// Reconcile observes the Job, its Workload and its lock, decides the next step (see decide), and
// acts. The request names the Job.
func (r *KueueCheckReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job, err := r.getJob(ctx, req.NamespacedName)
	if err != nil || job == nil {
		if job == nil && err == nil {
			r.Locks.ForgetObject(bookKind, req.NamespacedName)
			r.waiting.DoneObject(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Job", klog.KObj(job)))
	p, err := r.observe(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	return sreconcile.Steps(ctx, maxStepsPerPass,
		func() step { return decide(p.obs) },
		func(ctx context.Context, st step) (ctrl.Result, bool, error) { return r.act(ctx, p, st) })
}

// getJob reads the Job from the cache of labelled Jobs, else from the API server; nil when neither
// has it or Kueue does not admit it.
func (r *KueueCheckReconciler) getJob(ctx context.Context, key client.ObjectKey) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	if ok, err := guard.Get(ctx, r.Jobs, r.APIReader, key, job, locks.IsKueueGuardedJob); !ok || err != nil {
		return nil, err
	}
	return job, nil
}

// SetupWithManager wires the reconciler: Jobs from the cache of labelled Jobs, their Workloads
// from the manager's cache, lost-lock events from the book, release wake-ups from Redis. It also
// sets up the reconciler that keeps our AdmissionChecks Active.
func (r *KueueCheckReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
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
	if r.Kueue == nil {
		r.Kueue = mgr.GetCache()
	}
	if r.Jobs == nil {
		return fmt.Errorf("kueuecheck: the cache of labelled Jobs is not set")
	}
	if err := (&ActiveCheckReconciler{Client: r.Client}).SetupWithManager(mgr); err != nil {
		return err
	}
	r.permits = sreconcile.PermitReader(mgr)
	pods, err := sreconcile.NewPodCache(ctx, mgr, "kueue job", kueuePods())
	if err != nil {
		return err
	}
	r.Pods = pods
	workloads := source.Kind(mgr.GetCache(), client.Object(newObject(KindWorkload)),
		handler.EnqueueRequestsFromMapFunc(jobOfWorkload(r.Jobs)))
	return guard.Complete(mgr, &batchv1.Job{}, guard.Wiring{
		Name: "kueuecheck", Locks: r.Locks, Identity: r.Config.Identity, Kind: locks.KindJob, BookKind: bookKind,
		Objects: r.Jobs, Named: namedJob, Waiters: r.waiters, Stop: r.stopWorkload,
		Waiting: &r.waiting, Config: &r.Config,
		Sources: []source.Source{workloads, source.Kind(pods, &corev1.Pod{}, sreconcile.JobOfSucceededPod())},
		Permits: r.permits, Workers: r.Config.MaxConcurrentReconciles,
	}, r)
}

// jobOfWorkload wakes the Job that controls a Workload: with admission checks, since one may be
// ours; without any, only once Kueue admitted it and the Job is one of ours in the cache of labelled
// Jobs (a locked Job that Kueue let run without our check, to be marked Unguarded). Any other
// Workload is never ours, and its Job costs no read.
func jobOfWorkload(jobs client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		ref, ok := controllerJobOf(o)
		if !ok {
			return nil
		}
		wl, isU := o.(*unstructured.Unstructured)
		if !isU {
			return nil
		}
		key := client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}
		if len(checkStates(wl)) == 0 {
			job := &batchv1.Job{}
			if !conditionTrue(wl, conditionAdmitted) || jobs.Get(ctx, key, job) != nil || job.UID != ref.UID || !locks.IsKueueGuardedJob(job) {
				return nil
			}
		}
		return []reconcile.Request{{NamespacedName: key}}
	}
}

// kueuePods selects the pods of the Jobs Kueue admitted under our check: admit puts
// LabelGuardedJobPod GuardedJobPodKueue in the check's podSetUpdates, and Kueue writes it into the
// pod template as it unsuspends the Job. Pods of a Job admitted by an earlier version carry none,
// and their locks wait for the Job's condition.
func kueuePods() labels.Selector {
	return labels.SelectorFromSet(labels.Set{batchv1alpha1.LabelGuardedJobPod: batchv1alpha1.GuardedJobPodKueue})
}

// namedJob names a Job in a wake-up.
func namedJob(namespace, name string) client.Object {
	job := &batchv1.Job{}
	job.Namespace, job.Name = namespace, name
	return job
}

// waiters are the Jobs of this reconciler that wait for the lock whose Redis key is key (every
// lock's for ""): not recorded as holding.
func (r *KueueCheckReconciler) waiters(ctx context.Context, key string) []client.Object {
	list := &batchv1.JobList{}
	if err := r.Jobs.List(ctx, list); err != nil {
		return nil
	}
	var out []client.Object
	for i := range list.Items {
		job := &list.Items[i]
		if !locks.IsKueueGuardedJob(job) || batchv1alpha1.GuardState(job.Annotations[batchv1alpha1.AnnotationGuard]) == batchv1alpha1.GuardHeld {
			continue
		}
		if key != "" {
			c, err := locks.ClaimantOfJob(job)
			if err != nil || r.Locks.RedisKey(r.Config.Identity.LockKey(c)) != key {
				continue
			}
		}
		out = append(out, job)
	}
	return out
}

// event emits an Event on the Job with its note cut (sreconcile.CutMessage).
func (r *KueueCheckReconciler) event(job *batchv1.Job, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(job, nil, eventType, reason, action, "%s", sreconcile.CutMessage(fmt.Sprintf(note, args...)))
	}
}

// holdings acquires, re-adopts and releases through the book (guard.Holdings).
func (r *KueueCheckReconciler) holdings() guard.Holdings {
	return guard.Holdings{Locks: r.Locks, Permits: r.permits, Config: &r.Config, Waiting: &r.waiting}
}

// workloadOf is what the lock book knows of the Job, filed under this reconciler's kind.
func (p *pass) workloadOf() lockbook.Workload {
	w := lockbook.WorkloadOf(p.claimant, p.job.Name)
	w.Kind = bookKind
	return w
}

// hasFinalizer is ours on the Job.
func hasFinalizer(job *batchv1.Job) bool { return controllerutil.ContainsFinalizer(job, finalizer) }
