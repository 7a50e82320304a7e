package plugin

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Explanation is what `kubectl lockedjob why` says about one LockedJob or guarded Job, as data
// (-o json|yaml).
type Explanation struct {
	// Kind is LockedJob, or Job for a guarded Job (a batch/v1 Job labelled batch.lockedjob.dev/lock).
	Kind      locks.Kind              `json:"kind"`
	Namespace string                  `json:"namespace"`
	Name      string                  `json:"name"`
	Lock      string                  `json:"lock"`
	Scope     batchv1alpha1.LockScope `json:"scope"`
	Priority  int32                   `json:"priority"`
	// Phase and Message are a LockedJob's status.phase and status.message.
	Phase   batchv1alpha1.LockedJobPhase `json:"phase,omitempty"`
	Message string                       `json:"message,omitempty"`
	// Guard is where a guarded Job stands: its annotation batch.lockedjob.dev/guard (Held, Released,
	// Lost, Unguarded, ScopeNotAllowed), or Waiting, which the operator does not write: suspended by
	// the admission gate, with no fence. Empty while it runs and the operator recorded nothing yet.
	Guard batchv1alpha1.GuardState `json:"guard,omitempty"`
	// Invalid says why the operator cannot guard a Job that carries the lock label: the label or
	// annotation that does not parse (locks.ClaimantOfJob).
	Invalid string `json:"invalid,omitempty"`
	// Holder is who holds the lock: the workload itself while it holds it, another (the first of
	// Holders) while it waits.
	Holder *Holder `json:"holder,omitempty"`
	// Permits is how many may hold the lock at once: spec.permits of the Lock (ClusterLock) that
	// declares it, else 1; 0 when that Lock could not be read.
	Permits int `json:"permits,omitempty"`
	// InUse is how many hold the lock, while it waits or runs: the length of Holders.
	InUse int `json:"inUse,omitempty"`
	// Holders are all who hold the lock, lowest slot first, while it waits or runs (itself among
	// them): several for a semaphore.
	Holders []Holder `json:"holders,omitempty"`
	// FencingToken is its own fencing token once it acquired the lock.
	FencingToken *int64 `json:"fencingToken,omitempty"`
	// Slot is its own slot of a semaphore once it acquired it (status.slot, a guarded Job's
	// annotation batch.lockedjob.dev/slot); the fencing token
	// orders it against the earlier holders of this slot.
	Slot *int32 `json:"slot,omitempty"`
	// ReleasedAt is when a Running LockedJob gave its lock back at its pod's outcome, before its
	// Job's condition (which its phase waits for).
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
	// PermitsUnsupported says it waits because its lock declares more than one permit and the
	// operator's Redis is Redlock, which admits one holder per lock (condition LockAcquired, reason
	// PermitsUnsupported).
	PermitsUnsupported bool `json:"permitsUnsupported,omitempty"`
	// Place is a LockedJob's place in line while it waits (a guarded Job records none).
	Place *Place `json:"place,omitempty"`
	// Ahead are the waiters served before it, in queue order; Behind counts those after it.
	Ahead  []Waiter `json:"ahead,omitempty"`
	Behind int      `json:"behind"`
	// Job is the Job a LockedJob created once it acquired the lock; a guarded Job itself.
	Job *JobState `json:"job,omitempty"`
	// Ending is how it ended, once condition Finished is True.
	Ending *Ending `json:"ending,omitempty"`
	// Events are its last Events, oldest first.
	Events []EventView `json:"events,omitempty"`
}

// Place is a waiter's place in line as status shows it: exact for the first places
// (status.queuePosition), else only the bucket it is in ("more than N").
type Place struct {
	Exact    int32 `json:"exact,omitempty"`
	MoreThan int   `json:"moreThan,omitempty"`
}

// Waiter is another LockedJob or guarded Job in line for the same lock.
type Waiter struct {
	Kind      locks.Kind `json:"kind"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Priority  int32      `json:"priority"`
	// WaitingSince and QueuePosition are a LockedJob's; a guarded Job records neither.
	WaitingSince  *metav1.Time `json:"waitingSince,omitempty"`
	QueuePosition *int32       `json:"queuePosition,omitempty"`
}

// JobState is a LockedJob's Job, or a guarded Job, as the Job API reports it.
type JobState struct {
	Name string `json:"name"`
	// Exists is false when the Job is gone (deleted, or removed by its TTL after it finished).
	Exists    bool  `json:"exists"`
	Active    int32 `json:"active"`
	Succeeded int32 `json:"succeeded"`
	Failed    int32 `json:"failed"`
}

// Ending is condition Finished of a LockedJob that reached its end.
type Ending struct {
	Phase      batchv1alpha1.LockedJobPhase `json:"phase"`
	Reason     string                       `json:"reason"`
	Message    string                       `json:"message,omitempty"`
	At         metav1.Time                  `json:"at"`
	ReleasedAt *metav1.Time                 `json:"releasedAt,omitempty"`
}

// EventView is one Event about the LockedJob or guarded Job.
type EventView struct {
	At     metav1.Time `json:"at"`
	Type   string      `json:"type"`
	Reason string      `json:"reason"`
	Note   string      `json:"note"`
	Count  int32       `json:"count,omitempty"`
}

// explain reads the workload of kind (a LockedJob, or a guarded Job) named key, and explains it.
func explain(ctx context.Context, c client.Reader, kind locks.Kind, key client.ObjectKey, events int) (*Explanation, []string, error) {
	if kind == locks.KindJob {
		return explainJob(ctx, c, key, events)
	}
	return explainLockedJob(ctx, c, key, events)
}

// explainLockedJob reads the LockedJob, the other workloads of its lock, the permits its Lock
// declares, its Job and its Events.
func explainLockedJob(ctx context.Context, c client.Reader, key client.ObjectKey, events int) (*Explanation, []string, error) {
	var lj batchv1alpha1.LockedJob
	if err := c.Get(ctx, key, &lj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("lockedjob %q not found in namespace %s", key.Name, key.Namespace)
		}
		return nil, nil, fmt.Errorf("get lockedjob %s: %w", key.Name, err)
	}
	self := memberOfLockedJob(&lj)
	e := &Explanation{
		Kind: locks.KindLockedJob, Namespace: lj.Namespace, Name: lj.Name, Lock: lj.Spec.Lock.Name, Scope: self.lock().scope,
		Priority: lj.Spec.Lock.Priority, Phase: lj.Status.Phase, Message: lj.Status.Message,
		FencingToken: lj.Status.FencingToken, Slot: lj.Status.Slot,
	}
	running := lj.Status.Phase == batchv1alpha1.PhaseRunning
	if running && lj.Status.ReleasedAt != nil {
		e.ReleasedAt, running = lj.Status.ReleasedAt, false // it holds nothing any more
	}
	warnings, err := e.explainLock(ctx, c, self, lj.Status.Phase == batchv1alpha1.PhaseWaiting, running)
	if err != nil {
		return nil, nil, err
	}
	e.Ending = endingOf(&lj)
	if lj.Status.JobName != "" {
		if e.Job, err = jobState(ctx, c, lj.Namespace, lj.Status.JobName); err != nil {
			return nil, nil, err
		}
	}
	if events > 0 {
		if e.Events, err = lastEvents(ctx, c, kindLockedJob, lj.ObjectMeta, events); err != nil {
			return nil, nil, err
		}
	}
	return e, warnings, nil
}

// explainJob reads the guarded Job, the other workloads of its lock, the permits its Lock declares
// and its Events. A Job without the lock label is no guarded Job; one whose label or annotations do
// not parse is explained by what does not parse.
func explainJob(ctx context.Context, c client.Reader, key client.ObjectKey, events int) (*Explanation, []string, error) {
	var job batchv1.Job
	if err := c.Get(ctx, key, &job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("job %q not found in namespace %s", key.Name, key.Namespace)
		}
		return nil, nil, fmt.Errorf("get job %s: %w", key.Name, err)
	}
	lock, labelled := job.Labels[batchv1alpha1.LabelGuardLock]
	if !labelled {
		return nil, nil, fmt.Errorf("job %s is not a guarded Job: it has no label %s", key.Name, batchv1alpha1.LabelGuardLock)
	}
	e := &Explanation{Kind: locks.KindJob, Namespace: job.Namespace, Name: job.Name, Lock: lock, Guard: guardOf(&job),
		Job: &JobState{Name: job.Name, Exists: true, Active: job.Status.Active, Succeeded: job.Status.Succeeded, Failed: job.Status.Failed}}
	var warnings []string
	self, err := memberOfJob(&job)
	if err != nil {
		e.Invalid = err.Error()
	} else {
		e.Scope, e.Priority, e.FencingToken, e.Slot = self.lock().scope, self.claimant.Lock.Priority, self.fence, self.slot
		if warnings, err = e.explainLock(ctx, c, self, e.Guard == guardWaiting, e.Guard == batchv1alpha1.GuardHeld); err != nil {
			return nil, nil, err
		}
	}
	if events > 0 {
		if e.Events, err = lastEvents(ctx, c, "Job", job.ObjectMeta, events); err != nil {
			return nil, nil, err
		}
	}
	return e, warnings, nil
}

// explainLock reads the other workloads of self's lock, and, while self waits or holds it, says
// who holds it and who waits, and how many permits its Lock declares.
func (e *Explanation) explainLock(ctx context.Context, c client.Reader, self member, waiting, holding bool) ([]string, error) {
	ljs, jobs, warnings, err := listWorkloads(ctx, c, self.claimant.Namespace)
	if err != nil {
		return nil, err
	}
	members, _ := membersOf(ljs, jobs)
	var peers []*member
	for i := range members {
		if other := &members[i]; other.claimant.UID != self.claimant.UID && other.lock() == self.lock() {
			peers = append(peers, other)
		}
	}
	switch {
	case waiting:
		e.explainWaiting(self, peers)
	case holding:
		e.Holder = firstOf(holdersOf([]*member{&self}, nil))
		e.setHolders(holdersOf(append(peers, &self), nil))
		e.Behind = len(waitersInQueueOrder(peers))
	default:
		return warnings, nil
	}
	var more []string
	if e.Permits, more, err = declaredPermits(ctx, c, self.claimant); err != nil {
		return nil, err
	}
	return append(warnings, more...), nil
}

// explainWaiting names the holders and the waiters ahead of self, in the queue's order. With no
// holder in view, a waiting LockedJob names the holder Redis named to it at its last attempt; a
// guarded Job, which records none, the one the first waiting LockedJob was told.
func (e *Explanation) explainWaiting(self member, peers []*member) {
	waiters := waitersInQueueOrder(peers)
	holders := holdersOf(peers, nil)
	if len(holders) == 0 {
		if lj := self.lj; lj != nil {
			if lj.Status.BlockedBy != "" {
				holders = []Holder{holderNamed(lj.Status.BlockedBy)}
			}
		} else {
			holders = holdersOf(nil, waiters)
		}
	}
	e.setHolders(holders)
	e.Holder = firstOf(holders)
	if lj := self.lj; lj != nil {
		acquired := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired)
		e.PermitsUnsupported = acquired != nil && acquired.Status == metav1.ConditionFalse && acquired.Reason == batchv1alpha1.ReasonPermitsUnsupported
		e.Place = placeOf(lj)
	}
	for _, w := range waiters {
		if locks.QueueCompare(w.claimant, self.claimant) >= 0 {
			e.Behind++
			continue
		}
		ahead := Waiter{Kind: w.claimant.Kind, Namespace: w.claimant.Namespace, Name: w.claimant.Name, Priority: w.claimant.Lock.Priority}
		if w.lj != nil {
			ahead.WaitingSince, ahead.QueuePosition = w.lj.Status.WaitingSince, w.lj.Status.QueuePosition
		}
		e.Ahead = append(e.Ahead, ahead)
	}
}

func (e *Explanation) setHolders(holders []Holder) {
	e.Holders, e.InUse = nil, len(holders)
	if len(holders) > 0 {
		e.Holders = holders
	}
}

// bucketPattern finds the bucket of a waiter far back in line in its status message, the one place
// the operator records it (controllers/lockedjob/wait.go: "position >N in queue").
var bucketPattern = regexp.MustCompile(`position >(\d+) in queue`)

// placeOf is a waiter's place as status shows it, or nil before the operator learnt it.
func placeOf(lj *batchv1alpha1.LockedJob) *Place {
	if p := lj.Status.QueuePosition; p != nil {
		return &Place{Exact: *p}
	}
	if m := bucketPattern.FindStringSubmatch(lj.Status.Message); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return &Place{MoreThan: n}
		}
	}
	return nil
}

// endingOf reads condition Finished; nil until it is True.
func endingOf(lj *batchv1alpha1.LockedJob) *Ending {
	c := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionFinished)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	return &Ending{Phase: lj.Status.Phase, Reason: c.Reason, Message: c.Message, At: c.LastTransitionTime, ReleasedAt: lj.Status.ReleasedAt}
}

func jobState(ctx context.Context, c client.Reader, namespace, name string) (*JobState, error) {
	var job batchv1.Job
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		return &JobState{Name: name}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", name, err)
	}
	return &JobState{Name: name, Exists: true, Active: job.Status.Active, Succeeded: job.Status.Succeeded, Failed: job.Status.Failed}, nil
}

// lastEvents are the last n Events about the object of kind (events.k8s.io/v1, regarding it),
// oldest first. Events of an earlier object of the same name are left out by UID.
func lastEvents(ctx context.Context, c client.Reader, kind string, obj metav1.ObjectMeta, n int) ([]EventView, error) {
	var list eventsv1.EventList
	sel := fields.Set{"regarding.name": obj.Name, "regarding.kind": kind}.AsSelector()
	if err := c.List(ctx, &list, client.InNamespace(obj.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list events of %s %s: %w", strings.ToLower(kind), obj.Name, err)
	}
	views := make([]EventView, 0, len(list.Items))
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Regarding.UID != "" && ev.Regarding.UID != obj.UID {
			continue
		}
		views = append(views, EventView{At: eventTime(ev), Type: ev.Type, Reason: ev.Reason, Note: ev.Note, Count: eventCount(ev)})
	}
	slices.SortStableFunc(views, func(a, b EventView) int { return a.At.Compare(b.At.Time) })
	return views[max(0, len(views)-n):], nil
}

// eventTime is when an Event last happened: a series' last observation, else the time it was
// first recorded, else the time the older Events API recorded.
func eventTime(ev *eventsv1.Event) metav1.Time {
	switch {
	case ev.Series != nil:
		return metav1.Time{Time: ev.Series.LastObservedTime.Time}
	case !ev.EventTime.IsZero():
		return metav1.Time{Time: ev.EventTime.Time}
	case !ev.DeprecatedLastTimestamp.IsZero():
		return ev.DeprecatedLastTimestamp
	}
	return ev.CreationTimestamp
}

func eventCount(ev *eventsv1.Event) int32 {
	if ev.Series != nil {
		return ev.Series.Count
	}
	return ev.DeprecatedCount
}
