package lockedcronjob

import (
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// cronObservation is everything one pass of the LockedCronJob reconciler sees before it decides:
// the time, the parsed spec, what status says was already done, and the LockedJobs this
// LockedCronJob created. decideCron reads nothing else, so every case is a row in a table test.
type cronObservation struct {
	now time.Time

	// schedule is the parsed spec.schedule, read in loc; nil when invalid says why.
	schedule cron.Schedule
	loc      *time.Location
	invalid  bool

	// scopeAllowed: the operator lets this namespace use the template's lock scope (locks.ScopeGate).
	// Without it the lock is another tenant's: it is never asked about, and no run is created.
	scopeAllowed bool

	suspended bool
	onBusy    batchv1alpha1.OnBusyPolicy
	// since is the last run already dealt with (created or skipped), or the creation of the
	// LockedCronJob: only a scheduled time after it is due.
	since time.Time
	// deadline is spec.startingDeadlineSeconds; nil means a missed run starts however late.
	deadline *time.Duration

	successLimit, failedLimit int
	// children are this LockedCronJob's LockedJobs, oldest scheduled time first.
	children []cronChild
	// lockHeld is whether anyone holds the lock now, as Redis said in this pass; nil while not
	// asked. Only onBusy Skip asks, and only when a run is due.
	lockHeld *bool
}

// cronChild is what a LockedCronJob needs to know of one of its LockedJobs.
type cronChild struct {
	name      string
	uid       types.UID
	scheduled time.Time // the run it was created for
	finished  bool      // phase Succeeded, Failed or LockLost
	succeeded bool
	endedAt   time.Time // when it succeeded or failed, if finished
	deleting  bool
}

// cronStep is what one pass does about the due run; decideCron picks exactly one.
type cronStep int

const (
	cronIdle            cronStep = iota // no run due: wait for the next scheduled time
	cronInvalid                         // the schedule or time zone does not parse: wait for the user
	cronScopeNotAllowed                 // the template's lock scope is not allowed here: wait for the user
	cronInspectLock                     // onBusy Skip, a run is due: ask Redis whether the lock is held
	cronRecordRun                       // the due run's LockedJob exists already: only status is behind
	cronCreate                          // create the due run's LockedJob
	cronSkip                            // the lock is busy (onBusy Skip): record a skipped run
	cronReplace                         // onBusy Replace: delete this LockedCronJob's unfinished LockedJobs
)

var cronStepNames = [...]string{"Idle", "Invalid", "ScopeNotAllowed", "InspectLock", "RecordRun", "Create", "Skip", "Replace"}

func (s cronStep) String() string { return cronStepNames[s] }

// cronPlan is the decision of one pass.
type cronPlan struct {
	step cronStep
	run  time.Time // the scheduled time of the due run (zero when none is due)
	// replace are the unfinished LockedJobs of this LockedCronJob to delete (cronReplace).
	replace []cronChild
	// prune are finished LockedJobs beyond the history limits, oldest first.
	prune []cronChild
	// next is the first scheduled time after now; zero while suspended, invalid or not allowed its
	// lock scope.
	next time.Time
}

// decideCron is the LockedCronJob's decision for what a pass observed. It is pure.
//
// A run is due when a scheduled time lies after since and no later than now (and within the
// starting deadline); of several missed ones only the most recent is due, as with CronJob, so an
// operator that was down never starts a burst of catch-up runs. A run whose LockedJob exists was
// created by an earlier pass whose status write was lost: it is recorded, never created again,
// and never counted as busy against itself.
func decideCron(o cronObservation) cronPlan {
	plan := cronPlan{prune: pruneHistory(o.children, o.successLimit, o.failedLimit)}
	if o.invalid || o.schedule == nil {
		plan.step = cronInvalid
		return plan
	}
	if !o.scopeAllowed {
		// As its LockedJobs would be refused: every run would wait for ever, and onBusy Skip would
		// ask Redis about a lock this namespace may not even look at.
		plan.step = cronScopeNotAllowed
		return plan
	}
	if o.suspended {
		return plan
	}
	plan.next = o.schedule.Next(o.now.In(o.loc))
	since := o.since
	if o.deadline != nil {
		if earliest := o.now.Add(-*o.deadline); earliest.After(since) {
			since = earliest
		}
	}
	plan.run = mostRecentRun(o.schedule, o.loc, since, o.now)
	if plan.run.IsZero() {
		return plan
	}
	if slices.ContainsFunc(o.children, func(c cronChild) bool { return c.scheduled.Equal(plan.run) }) {
		plan.step = cronRecordRun
		return plan
	}
	switch o.onBusy {
	case batchv1alpha1.OnBusySkip:
		switch {
		case slices.ContainsFunc(o.children, func(c cronChild) bool { return !c.finished }):
			plan.step = cronSkip
		case o.lockHeld == nil:
			plan.step = cronInspectLock
		case *o.lockHeld:
			plan.step = cronSkip
		default:
			plan.step = cronCreate
		}
	case batchv1alpha1.OnBusyReplace:
		for _, c := range o.children {
			if !c.finished && !c.deleting {
				plan.replace = append(plan.replace, c)
			}
		}
		plan.step = cronCreate
		if len(plan.replace) > 0 {
			plan.step = cronReplace
		}
	default:
		plan.step = cronCreate
	}
	return plan
}

// mostRecentRun is the latest scheduled time in (since, now], or zero if there is none.
//
// It does not walk every missed time from since: after a long outage of a schedule that fires
// every minute that is one parser call per minute. It looks back from now, doubling the distance,
// until a scheduled time falls before now, and walks forward only from there.
func mostRecentRun(s cron.Schedule, loc *time.Location, since, now time.Time) time.Time {
	first := s.Next(since.In(loc))
	if first.IsZero() || first.After(now) {
		return time.Time{}
	}
	start := since
	for back := time.Minute; now.Add(-back).After(since); back *= 2 {
		if t := s.Next(now.Add(-back).In(loc)); !t.IsZero() && !t.After(now) {
			start = now.Add(-back)
			break
		}
	}
	var last time.Time
	for t := s.Next(start.In(loc)); !t.IsZero() && !t.After(now); t = s.Next(t) {
		last = t
	}
	return last
}

// pruneHistory returns the finished LockedJobs beyond the limits, the oldest of each kind first
// (failed counts Failed and LockLost). children are sorted oldest first.
func pruneHistory(children []cronChild, successLimit, failedLimit int) []cronChild {
	var succeeded, failed []cronChild
	for _, c := range children {
		switch {
		case !c.finished || c.deleting:
		case c.succeeded:
			succeeded = append(succeeded, c)
		default:
			failed = append(failed, c)
		}
	}
	var out []cronChild
	if extra := len(succeeded) - successLimit; extra > 0 {
		out = append(out, succeeded[:extra]...)
	}
	if extra := len(failed) - failedLimit; extra > 0 {
		out = append(out, failed[:extra]...)
	}
	return out
}
