// Package guardedpod is the reconciler of guarded Pods (docs/design.md, "Guarded Pods"): Pods
// labelled batch.lockedjob.dev/lock that no batch/v1 Job controls (locks.IsGuardedPod: bare ones,
// an Argo Workflow's, a Tekton TaskRun's), which the admission gate (config/guard) creates behind
// a scheduling gate. It acquires the Pod's lock through the lock book, under the rules of
// internal/locks that every other reconciler follows (one key, one queue, one fencing sequence per
// lock name and scope), ungates the Pod with the fence in its annotations in one write, and
// releases the lock once the Pod runs nothing.
package guardedpod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// maxStepsPerPass bounds the steps one pass chains (acquire → ungate is the longest; a re-adoption
// that finds the lock lost goes on to lose it).
const maxStepsPerPass = 4

// Config is the operator-wide behaviour of the reconciler, that of every guard reconciler.
type Config = guard.Config

// GuardedPodReconciler reconciles a guarded Pod: it acquires the lock, ungates the Pod under it, and
// releases the lock when the Pod ends or is deleted and runs nothing.
type GuardedPodReconciler struct {
	// Client writes (merge patches, deletes) to the API server; Pods are read from Pods.
	Client client.Client
	// Pods reads labelled Pods from the reconciler's own cache (NewCache).
	Pods client.Reader
	// APIReader reads a Pod the cache does not have (yet).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Locks     *lockbook.Book
	Config    Config
	Clock     clock.PassiveClock

	permits locks.PermitReader
	// waiting is the wait book of this reconciler's waiters (guard.Holdings.Asks and Wait).
	waiting waitbook.Book
}

// pass is one run of Reconcile: the Pod as read and what the pass knows of its lock.
type pass struct {
	pod      *corev1.Pod
	claimant locks.Claimant
	claim    lockbook.Claim
	obs      observation
	acquired string // the acquisition of this pass, for the ungate Event
	drift    string // how the label or annotations of a held Pod differ from the lock it holds
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the guarded Pod and its lock, decides the next step (see decide), and acts.
// Every write is an optimistic merge patch of the Pod itself, or its deletion.
func (r *GuardedPodReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod, err := r.getPod(ctx, req.NamespacedName)
	if err != nil || pod == nil {
		if pod == nil && err == nil {
			r.Locks.ForgetObject(locks.KindPod, req.NamespacedName)
			r.waiting.DoneObject(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Pod", klog.KObj(pod))
	ctx = ctrl.LoggerInto(ctx, log)

	p := r.observe(pod)
	if p.drift != "" {
		r.event(pod, corev1.EventTypeWarning, batchv1alpha1.ReasonGuardInvalid, "Reconcile", "%s", p.drift)
	}
	return sreconcile.Steps(ctx, maxStepsPerPass,
		func() step { return decide(p.obs) },
		func(ctx context.Context, st step) (ctrl.Result, bool, error) { return r.act(ctx, p, st) })
}

// getPod reads the Pod from the reconciler's cache, else from the API server; nil when neither has
// it, or it is neither a guarded Pod nor one that carries our finalizer (a held Pod keeps its lock
// until it is released, whoever owns it now).
func (r *GuardedPodReconciler) getPod(ctx context.Context, key client.ObjectKey) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	ours := func(pod *corev1.Pod) bool {
		return locks.IsGuardedPod(pod) || controllerutil.ContainsFinalizer(pod, guard.Finalizer)
	}
	if ok, err := guard.Get(ctx, r.Pods, r.APIReader, key, pod, ours); !ok || err != nil {
		return nil, err
	}
	return pod, nil
}

// SetupWithManager wires the reconciler: labelled Pods from a cache of their own, lost-lock events
// from the book and release wake-ups from Redis. It may be called again with a new manager.
func (r *GuardedPodReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
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
	pods, err := NewCache(mgr)
	if err != nil {
		return err
	}
	if err := indexLockKey(ctx, pods, r.Config.Identity, r.Locks); err != nil {
		return err
	}
	if err := mgr.Add(pods); err != nil {
		return fmt.Errorf("add guarded pod cache: %w", err)
	}
	r.Pods = pods
	r.permits = sreconcile.PermitReader(mgr)
	return guard.Complete(mgr, &corev1.Pod{}, guard.Wiring{
		Name: "guardedpod", Locks: r.Locks, Identity: r.Config.Identity, Kind: locks.KindPod, Objects: pods,
		Named: namedPod, Waiters: r.waiters, Stop: r.stopWorkload,
		Waiting: &r.waiting, Config: &r.Config,
		Permits: r.permits, Workers: r.Config.MaxConcurrentReconciles,
	}, r)
}

// event emits an Event on the Pod with its note cut (sreconcile.CutMessage).
func (r *GuardedPodReconciler) event(pod *corev1.Pod, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pod, nil, eventType, reason, action, "%s", sreconcile.CutMessage(fmt.Sprintf(note, args...)))
	}
}

// holdings re-adopts and releases through the book (guard.Holdings).
func (r *GuardedPodReconciler) holdings() guard.Holdings {
	return guard.Holdings{Locks: r.Locks, Permits: r.permits, Config: &r.Config, Waiting: &r.waiting}
}
