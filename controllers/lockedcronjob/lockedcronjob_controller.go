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

package lockedcronjob

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// maxCronStepsPerPass bounds the steps one pass chains (ask Redis → skip, or replace → create →
// idle is the longest).
const maxCronStepsPerPass = 4

// LockedCronJobReconciler reconciles a LockedCronJob: at each scheduled time it creates a
// LockedJob, queues, skips or replaces by spec.onBusy, and keeps the history within its limits.
type LockedCronJobReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Locks and Identity are the LockedJob reconciler's: onBusy Skip asks the book whether the
	// lock its LockedJobs would acquire is held, under the key they would acquire it with.
	Locks    *lockbook.Book
	Identity locks.Identity
	// ClusterScopeNamespaces is the LockedJob reconciler's gate (Config.ClusterScopeNamespaces):
	// where its LockedJobs may not use their lock, the LockedCronJob may not look at it either.
	ClusterScopeNamespaces locks.ScopeGate
	// RedisTimeout bounds the Redis call of a pass (default 2s).
	RedisTimeout time.Duration
	Clock        clock.PassiveClock

	permits locks.PermitReader
}

// cronPass is one run of Reconcile: the object as read, what it observed, and the status it records.
type cronPass struct {
	cj     *batchv1alpha1.LockedCronJob
	before *batchv1alpha1.LockedCronJob // what the API server has: base of the status patch
	obs    cronObservation
	// scheduleErr is the parser's word on an invalid schedule, with its reason.
	scheduleErr, scheduleReason string
	// holder is who holds the lock, as Redis said when onBusy Skip asked.
	holder string
}

// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedcronjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedcronjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedcronjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch.lockedjob.dev,resources=lockedjobs,verbs=get;list;watch;create;delete

// Reconcile observes the LockedCronJob and its LockedJobs, decides what the due run needs (see
// decideCron), acts, and records status in one optimistic patch at the end. It asks to run again
// at the next scheduled time; a change to one of its LockedJobs wakes it sooner.
func (r *LockedCronJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	cj := &batchv1alpha1.LockedCronJob{}
	if err := r.Get(ctx, req.NamespacedName, cj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its LockedJobs go with it (owner references)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("LockedCronJob", klog.KObj(cj))
	ctx = ctrl.LoggerInto(ctx, log)

	p := &cronPass{cj: cj, before: cj.DeepCopy()}
	if err := r.observeCron(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	var plan cronPlan
	defer func() {
		raced, err := r.recordCron(ctx, p, plan, reterr)
		if err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
		if raced && reterr == nil {
			result = ctrl.Result{RequeueAfter: reconcile.ConflictRequeue}
		}
	}()

	for range maxCronStepsPerPass {
		plan = decideCron(p.obs)
		log.V(1).Info("Reconciling", "step", plan.step.String(), "run", plan.run)
		next, err := r.actCron(ctx, p, plan)
		if err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: reconcile.ConflictRequeue}, nil
			}
			return ctrl.Result{}, err
		}
		if !next {
			break
		}
	}
	if err := r.prune(ctx, p, plan.prune); err != nil {
		return ctrl.Result{}, err
	}
	if plan.next.IsZero() {
		return ctrl.Result{}, nil // suspended or invalid: a spec change wakes it
	}
	return ctrl.Result{RequeueAfter: plan.next.Sub(p.obs.now)}, nil
}

// SetupWithManager wires the reconciler: LockedCronJobs and the LockedJobs they own.
func (r *LockedCronJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.RedisTimeout = reconcile.DurationOr(r.RedisTimeout, 2*time.Second)
	r.permits = reconcile.PermitReader(mgr)
	if kind := reconcile.UnservedKind(mgr, "LockedCronJob"); kind != "" {
		reconcile.SkipUnserved("LockedCronJob schedules", kind)
		return nil
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&batchv1alpha1.LockedCronJob{}).
		Owns(&batchv1alpha1.LockedJob{}).
		Named("lockedcronjob").
		Complete(r)
}

// event emits an Event with its note cut (reconcile.CutMessage): the events API refuses a longer one.
func (r *LockedCronJobReconciler) event(cj *batchv1alpha1.LockedCronJob, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(cj, nil, eventType, reason, action, "%s", reconcile.CutMessage(fmt.Sprintf(note, args...)))
	}
}
