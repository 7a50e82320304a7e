package lockedcronjob

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Acting on a LockedCronJob's plan, and recording its status.

// actCron carries out one step. next reports that the step changed what the pass observed and
// decideCron should decide again in the same pass.
func (r *LockedCronJobReconciler) actCron(ctx context.Context, p *cronPass, plan cronPlan) (next bool, err error) {
	switch plan.step {
	case cronIdle, cronInvalid, cronScopeNotAllowed:
		return false, nil
	case cronInspectLock:
		held, holder, err := r.lockHeld(ctx, p.cj)
		if err != nil {
			// Neither skipped nor created: the runtime retries with backoff until the run is
			// decided or its starting deadline passes.
			r.event(p.cj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Inspect",
				"Cannot tell whether lock %s is held, so the run scheduled at %s waits: %v",
				p.cj.Spec.LockedJobTemplate.Spec.Lock.Name, plan.run.UTC().Format(time.RFC3339), err)
			return false, err
		}
		p.obs.lockHeld, p.holder = &held, holder
		return true, nil
	case cronRecordRun:
		p.cj.Status.LastScheduleTime = &metav1.Time{Time: plan.run}
		p.obs.since = plan.run
		return true, nil
	case cronCreate:
		return true, r.createRun(ctx, p, plan.run)
	case cronSkip:
		r.skipRun(p, plan.run)
		return true, nil
	case cronReplace:
		return true, r.replace(ctx, p, plan.replace)
	}
	return false, fmt.Errorf("unknown cron step %d", plan.step)
}

// lockHeld asks Redis whether the lock the LockedCronJob's LockedJobs acquire, under the key the
// LockedJob reconciler would acquire it with, is busy: as many hold it as it has permits. holder is
// one of them (its name, never its token).
func (r *LockedCronJobReconciler) lockHeld(ctx context.Context, cj *batchv1alpha1.LockedCronJob) (held bool, holder string, err error) {
	lj := runLock(cj)
	permits, err := r.permits.Of(ctx, locks.ClaimantOf(lj))
	if err != nil {
		return false, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	defer cancel()
	slots, err := r.Locks.Slots(rctx, r.Identity.LockKey(locks.ClaimantOf(lj)))
	if err != nil {
		return false, "", fmt.Errorf("inspect lock %s: %w", cj.Spec.LockedJobTemplate.Spec.Lock.Name, err)
	}
	return slots.InUse() >= permits, slots.AHolder(), nil
}

// createRun creates the LockedJob of the run scheduled at run. Its name is derived from the run, so
// a pass that lost its status write finds it (AlreadyExists) instead of creating a second one.
func (r *LockedCronJobReconciler) createRun(ctx context.Context, p *cronPass, run time.Time) error {
	lj, err := r.lockedJobFor(p.cj, run)
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Creating LockedJob", "LockedJob", lj.Name, "run", run)
	switch err := r.Create(ctx, lj); {
	case err == nil:
		cronRunsTotal.WithLabelValues("created").Inc()
		r.event(p.cj, corev1.EventTypeNormal, batchv1alpha1.ReasonRunCreated, "Create",
			"Created LockedJob %s for the run scheduled at %s", lj.Name, run.UTC().Format(time.RFC3339))
	case apierrors.IsAlreadyExists(err):
		// An earlier pass created it and lost its status write; it told the Event already.
		if lj, err = r.ownRun(ctx, p.cj, lj.Name); err != nil {
			return err
		}
	default:
		return fmt.Errorf("create LockedJob %s: %w", lj.Name, err)
	}
	p.cj.Status.LastScheduleTime = &metav1.Time{Time: run}
	p.obs.since = run
	p.obs.children = append(p.obs.children, childOf(lj))
	return nil
}

// ownRun returns the existing LockedJob of a run if this LockedCronJob owns it.
func (r *LockedCronJobReconciler) ownRun(ctx context.Context, cj *batchv1alpha1.LockedCronJob, name string) (*batchv1alpha1.LockedJob, error) {
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cj.Namespace, Name: name}, lj); err != nil {
		return nil, fmt.Errorf("get LockedJob %s: %w", name, err)
	}
	if owner := metav1.GetControllerOf(lj); owner == nil || owner.UID != cj.UID {
		return nil, fmt.Errorf("create LockedJob %s: the name is taken by a LockedJob this LockedCronJob does not own", name)
	}
	return lj, nil
}

// lockedJobFor builds the LockedJob of a run: the template, the LockedCronJob's label, the run's
// time, and the LockedCronJob as controller.
func (r *LockedCronJobReconciler) lockedJobFor(cj *batchv1alpha1.LockedCronJob, run time.Time) (*batchv1alpha1.LockedJob, error) {
	tmpl := cj.Spec.LockedJobTemplate
	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   cj.Namespace,
			Name:        RunName(cj.Name, run),
			Labels:      maps.Clone(tmpl.Labels),
			Annotations: maps.Clone(tmpl.Annotations),
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if lj.Labels == nil {
		lj.Labels = map[string]string{}
	}
	if lj.Annotations == nil {
		lj.Annotations = map[string]string{}
	}
	lj.Labels[batchv1alpha1.LabelLockedCronJob] = batchv1alpha1.NameLabelValue(cj.Name)
	lj.Annotations[batchv1alpha1.AnnotationScheduledTime] = run.UTC().Format(time.RFC3339)
	if err := controllerutil.SetControllerReference(cj, lj, r.Scheme); err != nil {
		return nil, fmt.Errorf("own LockedJob %s: %w", lj.Name, err)
	}
	return lj, nil
}

// RunName is the name of the LockedJob of the run at run: the LockedCronJob's name and the run's
// time in Unix minutes (admission keeps the name short enough for both).
func RunName(cron string, run time.Time) string {
	return cron + "-" + strconv.FormatInt(run.Unix()/60, 10)
}

// skipRun records a run skipped because the lock is busy. The run counts as dealt with
// (lastSkippedTime), so it is not tried again when the lock frees.
func (r *LockedCronJobReconciler) skipRun(p *cronPass, run time.Time) {
	why := "lock " + p.cj.Spec.LockedJobTemplate.Spec.Lock.Name + " is held"
	if p.holder != "" {
		why += " by " + p.holder
	}
	var running []string
	for _, c := range p.obs.children {
		if !c.finished {
			running = append(running, c.name)
		}
	}
	if len(running) > 0 {
		why = "LockedJob " + strings.Join(running, ", ") + " has not finished"
	}
	st := &p.cj.Status
	st.LastSkippedTime = &metav1.Time{Time: run}
	st.SkippedRuns++
	p.obs.since = run
	cronRunsTotal.WithLabelValues("skipped").Inc()
	r.event(p.cj, corev1.EventTypeNormal, batchv1alpha1.ReasonSkipped, "Skip",
		"Skipped the run scheduled at %s: %s (onBusy Skip)", run.UTC().Format(time.RFC3339), why)
}

// replace deletes the unfinished LockedJobs of this LockedCronJob, and only those (the
// preconditions pin each to the UID it was listed with). A deleted LockedJob stops its Job and
// releases its lock once the pods are gone, so the next run never runs beside them.
func (r *LockedCronJobReconciler) replace(ctx context.Context, p *cronPass, victims []cronChild) error {
	var names []string
	for _, c := range victims {
		if err := r.deleteChild(ctx, p.cj, c); err != nil {
			return err
		}
		names = append(names, c.name)
		cronReplacedTotal.Inc()
		for i := range p.obs.children {
			if p.obs.children[i].uid == c.uid {
				p.obs.children[i].deleting = true
			}
		}
	}
	r.event(p.cj, corev1.EventTypeNormal, batchv1alpha1.ReasonReplaced, "Delete",
		"Deleted unfinished LockedJob %s for a new run (onBusy Replace)", strings.Join(names, ", "))
	return nil
}

// prune deletes finished LockedJobs beyond the history limits.
func (r *LockedCronJobReconciler) prune(ctx context.Context, p *cronPass, old []cronChild) error {
	for _, c := range old {
		ctrl.LoggerFrom(ctx).V(1).Info("Deleting LockedJob beyond the history limit", "LockedJob", c.name)
		if err := r.deleteChild(ctx, p.cj, c); err != nil {
			return err
		}
		for i := range p.obs.children {
			if p.obs.children[i].uid == c.uid {
				p.obs.children[i].deleting = true
			}
		}
	}
	return nil
}

func (r *LockedCronJobReconciler) deleteChild(ctx context.Context, cj *batchv1alpha1.LockedCronJob, c cronChild) error {
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: cj.Namespace, Name: c.name}}
	err := r.Delete(ctx, lj, client.Preconditions{UID: &c.uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete LockedJob %s: %w", c.name, err)
	}
	return nil
}

// recordCron is the one status write at the end of a pass, with optimistic locking: a pass that
// read a stale LockedCronJob must not count a skipped run twice or move lastScheduleTime back.
// raced reports a write that lost to a newer version of the object.
func (r *LockedCronJobReconciler) recordCron(ctx context.Context, p *cronPass, plan cronPlan, reterr error) (raced bool, err error) {
	st := &p.cj.Status
	st.Active = activeRefs(p.cj.Namespace, p.obs.children)
	for _, c := range p.obs.children {
		if c.succeeded && !c.endedAt.IsZero() && (st.LastSuccessfulTime == nil || c.endedAt.After(st.LastSuccessfulTime.Time)) {
			st.LastSuccessfulTime = &metav1.Time{Time: c.endedAt}
		}
	}
	st.NextScheduleTime = nil
	if !plan.next.IsZero() {
		st.NextScheduleTime = &metav1.Time{Time: plan.next}
	}
	r.setScheduleValid(p)
	r.setScopeAllowed(p)
	if reterr == nil {
		st.ObservedGeneration = p.cj.Generation
	}
	if equality.Semantic.DeepEqual(p.before.Status, p.cj.Status) {
		return false, nil
	}
	err = r.Status().Patch(ctx, p.cj, client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("record status: %w", err)
	}
	return false, nil
}

// maxActive is the API's bound on status.active (MaxItems).
const maxActive = 64

// activeRefs refers to the unfinished LockedJobs that are not being deleted, the newest maxActive
// of them: with onBusy Queue behind a lock held for long, runs can pile up beyond what status may
// list, and a status the API server refuses would stop every later run.
func activeRefs(ns string, children []cronChild) []corev1.ObjectReference {
	var refs []corev1.ObjectReference
	for _, c := range children {
		if !c.finished && !c.deleting {
			refs = append(refs, corev1.ObjectReference{
				APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "LockedJob",
				Namespace: ns, Name: c.name, UID: c.uid,
			})
		}
	}
	return refs[max(len(refs)-maxActive, 0):]
}

// setScheduleValid sets ScheduleValid from the parse of this pass; the first pass that finds the
// schedule invalid says so in a Warning Event too.
func (r *LockedCronJobReconciler) setScheduleValid(p *cronPass) {
	cj := p.cj
	status, reason, msg := metav1.ConditionTrue, batchv1alpha1.ReasonScheduleValid, "The schedule and time zone are valid"
	if p.scheduleErr != "" {
		status, reason, msg = metav1.ConditionFalse, p.scheduleReason, p.scheduleErr
		if !meta.IsStatusConditionFalse(cj.Status.Conditions, batchv1alpha1.ConditionScheduleValid) {
			r.event(cj, corev1.EventTypeWarning, reason, "Parse", "%s", msg)
		}
	}
	meta.SetStatusCondition(&cj.Status.Conditions, metav1.Condition{
		Type:               batchv1alpha1.ConditionScheduleValid,
		Status:             status,
		Reason:             reason,
		Message:            reconcile.CutMessage(msg),
		ObservedGeneration: cj.Generation,
		LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}

// setScopeAllowed sets ScopeAllowed from the scope gate's answer of this pass; the first pass that
// finds the scope not allowed says so in a Warning Event too. The message names neither the lock's
// holders nor the namespaces that are allowed: both are other tenants' business.
func (r *LockedCronJobReconciler) setScopeAllowed(p *cronPass) {
	cj := p.cj
	status, reason := metav1.ConditionTrue, batchv1alpha1.ReasonScopeAllowed
	msg := "The operator allows the lock scope of spec.lockedJobTemplate in this namespace"
	if !p.obs.scopeAllowed {
		status, reason = metav1.ConditionFalse, batchv1alpha1.ReasonScopeNotAllowed
		msg = fmt.Sprintf("spec.lockedJobTemplate.spec.lock.scope %s is not allowed in namespace %s: its LockedJobs could never acquire lock %s, so no run is created",
			cj.Spec.LockedJobTemplate.Spec.Lock.Scope, cj.Namespace, cj.Spec.LockedJobTemplate.Spec.Lock.Name)
		if !meta.IsStatusConditionFalse(cj.Status.Conditions, batchv1alpha1.ConditionScopeAllowed) {
			r.event(cj, corev1.EventTypeWarning, reason, "Schedule", "%s", msg)
		}
	}
	meta.SetStatusCondition(&cj.Status.Conditions, metav1.Condition{
		Type:               batchv1alpha1.ConditionScopeAllowed,
		Status:             status,
		Reason:             reason,
		Message:            reconcile.CutMessage(msg),
		ObservedGeneration: cj.Generation,
		LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}
