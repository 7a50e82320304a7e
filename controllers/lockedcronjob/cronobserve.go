package lockedcronjob

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	// The operator's image need not carry a time zone database: spec.timeZone must mean the same
	// wherever the operator runs.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Observing a LockedCronJob: its spec parsed, its status, and its LockedJobs.

// observeCron fills p.obs for decideCron. Redis is not asked here: only a due run of onBusy Skip
// needs the lock's state, and decideCron asks for it (cronInspectLock).
func (r *LockedCronJobReconciler) observeCron(ctx context.Context, p *cronPass) error {
	cj := p.cj
	o := &p.obs
	o.now = r.Clock.Now()
	o.scopeAllowed = r.ClusterScopeNamespaces.Allows(locks.ClaimantOf(runLock(cj)))
	o.suspended = cj.Spec.Suspend != nil && *cj.Spec.Suspend
	o.onBusy = cj.Spec.OnBusy
	o.successLimit = int(limitOr(cj.Spec.SuccessfulJobsHistoryLimit, 3))
	o.failedLimit = int(limitOr(cj.Spec.FailedJobsHistoryLimit, 1))
	if s := cj.Spec.StartingDeadlineSeconds; s != nil {
		d := time.Duration(*s) * time.Second
		o.deadline = &d
	}
	o.since = cj.CreationTimestamp.Time
	for _, t := range []*metav1.Time{cj.Status.LastScheduleTime, cj.Status.LastSkippedTime} {
		if t != nil && t.After(o.since) {
			o.since = t.Time
		}
	}
	o.schedule, o.loc, p.scheduleReason, p.scheduleErr = parseSchedule(cj.Spec, o.now)
	o.invalid = p.scheduleErr != ""

	children, err := r.children(ctx, cj)
	if err != nil {
		return err
	}
	o.children = children
	return nil
}

// runLock is the LockedJob of a run as far as its lock goes (namespace and spec): what the scope
// gate, the lock key and the permits are read from, so the LockedCronJob asks about the very lock
// its runs would acquire.
func runLock(cj *batchv1alpha1.LockedCronJob) *batchv1alpha1.LockedJob {
	return &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: cj.Namespace}, Spec: cj.Spec.LockedJobTemplate.Spec}
}

// parseSchedule reads spec.schedule in spec.timeZone (UTC when absent). It refuses what admission
// cannot check: a range that runs backwards, a step of 0, an unknown time zone, a date that never
// comes (30 February). reason and msg are empty when the schedule is valid.
func parseSchedule(spec batchv1alpha1.LockedCronJobSpec, now time.Time) (s cron.Schedule, loc *time.Location, reason, msg string) {
	loc = time.UTC
	if spec.TimeZone != nil {
		l, err := time.LoadLocation(*spec.TimeZone)
		if err != nil || strings.EqualFold(*spec.TimeZone, "Local") {
			return nil, nil, batchv1alpha1.ReasonInvalidTimeZone, fmt.Sprintf("spec.timeZone %q: unknown time zone", *spec.TimeZone)
		}
		loc = l
	}
	// Admission refuses a time zone in the schedule and @every; an object stored before those
	// rules, or written around them, is refused here, so the schedule means what spec.timeZone says.
	if strings.Contains(spec.Schedule, "TZ=") || strings.HasPrefix(strings.TrimSpace(spec.Schedule), "@every") {
		return nil, nil, batchv1alpha1.ReasonInvalidSchedule, fmt.Sprintf("spec.schedule %q: use five fields or a macro, and spec.timeZone for the time zone", spec.Schedule)
	}
	s, err := cron.ParseStandard(spec.Schedule)
	if err != nil {
		return nil, nil, batchv1alpha1.ReasonInvalidSchedule, fmt.Sprintf("spec.schedule %q: %v", spec.Schedule, err)
	}
	if s.Next(now.In(loc)).IsZero() {
		return nil, nil, batchv1alpha1.ReasonInvalidSchedule, fmt.Sprintf("spec.schedule %q: never comes in the next five years", spec.Schedule)
	}
	return s, loc, "", ""
}

// children lists this LockedCronJob's LockedJobs, oldest run first. The label finds them; the
// controller reference proves them ours, so a LockedCronJob recreated under the same name never
// deletes or counts its predecessor's.
func (r *LockedCronJobReconciler) children(ctx context.Context, cj *batchv1alpha1.LockedCronJob) ([]cronChild, error) {
	var list batchv1alpha1.LockedJobList
	if err := r.List(ctx, &list, client.InNamespace(cj.Namespace),
		client.MatchingLabels{batchv1alpha1.LabelLockedCronJob: batchv1alpha1.NameLabelValue(cj.Name)}); err != nil {
		return nil, fmt.Errorf("list LockedJobs of %s: %w", cj.Name, err)
	}
	var out []cronChild
	for i := range list.Items {
		lj := &list.Items[i]
		if owner := metav1.GetControllerOf(lj); owner == nil || owner.UID != cj.UID {
			continue
		}
		out = append(out, childOf(lj))
	}
	slices.SortFunc(out, func(a, b cronChild) int {
		if c := a.scheduled.Compare(b.scheduled); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

func childOf(lj *batchv1alpha1.LockedJob) cronChild {
	c := cronChild{
		name:      lj.Name,
		uid:       lj.UID,
		scheduled: lj.CreationTimestamp.Time,
		finished:  lj.Status.Phase.IsTerminal(),
		succeeded: lj.Status.Phase == batchv1alpha1.PhaseSucceeded,
		deleting:  !lj.DeletionTimestamp.IsZero(),
	}
	if t, err := time.Parse(time.RFC3339, lj.Annotations[batchv1alpha1.AnnotationScheduledTime]); err == nil {
		c.scheduled = t
	}
	if c.finished {
		if f := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionFinished); f != nil {
			c.endedAt = f.LastTransitionTime.Time
		}
		if lj.Status.ReleasedAt != nil {
			c.endedAt = lj.Status.ReleasedAt.Time
		}
	}
	return c
}

func limitOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return max(*p, 0)
}
