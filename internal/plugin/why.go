package plugin

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Explanation is what `kubectl lockedjob why` says about one LockedJob, as data (-o json|yaml).
type Explanation struct {
	Namespace string                       `json:"namespace"`
	Name      string                       `json:"name"`
	Lock      string                       `json:"lock"`
	Scope     batchv1alpha1.LockScope      `json:"scope"`
	Priority  int32                        `json:"priority"`
	Phase     batchv1alpha1.LockedJobPhase `json:"phase,omitempty"`
	Message   string                       `json:"message,omitempty"`
	// Holder is who holds the lock: the LockedJob itself while it runs, another (the first of
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
	// FencingToken is the LockedJob's own fencing token once it acquired the lock.
	FencingToken *int64 `json:"fencingToken,omitempty"`
	// Slot is its own slot of a semaphore once it acquired it (status.slot); the fencing token
	// orders it against the earlier holders of this slot.
	Slot *int32 `json:"slot,omitempty"`
	// PermitsUnsupported says it waits because its lock declares more than one permit and the
	// operator's Redis is Redlock, which admits one holder per lock (condition LockAcquired, reason
	// PermitsUnsupported).
	PermitsUnsupported bool `json:"permitsUnsupported,omitempty"`
	// Place is its place in line while it waits.
	Place *Place `json:"place,omitempty"`
	// Ahead are the waiters served before it, in queue order; Behind counts those after it.
	Ahead  []Waiter `json:"ahead,omitempty"`
	Behind int      `json:"behind"`
	// Job is the Job it created, once it acquired the lock.
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

// Waiter is another LockedJob in line for the same lock.
type Waiter struct {
	Namespace     string       `json:"namespace"`
	Name          string       `json:"name"`
	Priority      int32        `json:"priority"`
	WaitingSince  *metav1.Time `json:"waitingSince,omitempty"`
	QueuePosition *int32       `json:"queuePosition,omitempty"`
}

// JobState is the LockedJob's Job as the Job API reports it.
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

// EventView is one Event about the LockedJob.
type EventView struct {
	At     metav1.Time `json:"at"`
	Type   string      `json:"type"`
	Reason string      `json:"reason"`
	Note   string      `json:"note"`
	Count  int32       `json:"count,omitempty"`
}

// explain reads the LockedJob, the other LockedJobs of its lock, the permits its Lock declares, its
// Job and its Events.
func explain(ctx context.Context, c client.Reader, key client.ObjectKey, events int) (*Explanation, []string, error) {
	var lj batchv1alpha1.LockedJob
	if err := c.Get(ctx, key, &lj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("lockedjob %q not found in namespace %s", key.Name, key.Namespace)
		}
		return nil, nil, fmt.Errorf("get lockedjob %s: %w", key.Name, err)
	}
	e := &Explanation{
		Namespace: lj.Namespace, Name: lj.Name, Lock: lj.Spec.Lock.Name, Scope: lockOf(&lj).scope,
		Priority: lj.Spec.Lock.Priority, Phase: lj.Status.Phase, Message: lj.Status.Message,
		FencingToken: lj.Status.FencingToken, Slot: lj.Status.Slot,
	}
	all, warnings, err := listLockedJobs(ctx, c, lj.Namespace)
	if err != nil {
		return nil, nil, err
	}
	peers := peersOf(all, &lj)
	switch lj.Status.Phase {
	case batchv1alpha1.PhaseWaiting:
		e.explainWaiting(&lj, peers)
	case batchv1alpha1.PhaseRunning:
		e.Holder = firstOf(holdersOf([]*batchv1alpha1.LockedJob{&lj}, nil))
		e.setHolders(holdersOf(slices.Concat(peers, []*batchv1alpha1.LockedJob{&lj}), nil))
		e.Behind = len(waitersInQueueOrder(peers))
	}
	if lj.Status.Phase == batchv1alpha1.PhaseWaiting || lj.Status.Phase == batchv1alpha1.PhaseRunning {
		var more []string
		if e.Permits, more, err = declaredPermits(ctx, c, &lj); err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, more...)
	}
	e.Ending = endingOf(&lj)
	if lj.Status.JobName != "" {
		if e.Job, err = jobState(ctx, c, lj.Namespace, lj.Status.JobName); err != nil {
			return nil, nil, err
		}
	}
	if events > 0 {
		if e.Events, err = lastEvents(ctx, c, &lj, events); err != nil {
			return nil, nil, err
		}
	}
	return e, warnings, nil
}

// peersOf are the other LockedJobs of lj's lock.
func peersOf(all []batchv1alpha1.LockedJob, lj *batchv1alpha1.LockedJob) []*batchv1alpha1.LockedJob {
	var peers []*batchv1alpha1.LockedJob
	for i := range all {
		if other := &all[i]; other.UID != lj.UID && lockOf(other) == lockOf(lj) {
			peers = append(peers, other)
		}
	}
	return peers
}

func (e *Explanation) explainWaiting(lj *batchv1alpha1.LockedJob, peers []*batchv1alpha1.LockedJob) {
	waiters := waitersInQueueOrder(peers)
	holders := holdersOf(peers, nil)
	if len(holders) == 0 && lj.Status.BlockedBy != "" {
		holders = []Holder{{Identity: lj.Status.BlockedBy}}
	}
	e.setHolders(holders)
	e.Holder = firstOf(holders)
	acquired := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired)
	e.PermitsUnsupported = acquired != nil && acquired.Status == metav1.ConditionFalse && acquired.Reason == batchv1alpha1.ReasonPermitsUnsupported
	e.Place = placeOf(lj)
	for _, w := range waiters {
		if queueCompare(w, lj) >= 0 {
			e.Behind++
			continue
		}
		e.Ahead = append(e.Ahead, Waiter{
			Namespace: w.Namespace, Name: w.Name, Priority: w.Spec.Lock.Priority,
			WaitingSince: w.Status.WaitingSince, QueuePosition: w.Status.QueuePosition,
		})
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

// lastEvents are the last n Events about lj (events.k8s.io/v1, regarding it), oldest first. Events
// of an earlier LockedJob of the same name are left out by UID.
func lastEvents(ctx context.Context, c client.Reader, lj *batchv1alpha1.LockedJob, n int) ([]EventView, error) {
	var list eventsv1.EventList
	sel := fields.Set{"regarding.name": lj.Name, "regarding.kind": kindLockedJob}.AsSelector()
	if err := c.List(ctx, &list, client.InNamespace(lj.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list events of lockedjob %s: %w", lj.Name, err)
	}
	views := make([]EventView, 0, len(list.Items))
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Regarding.UID != "" && ev.Regarding.UID != lj.UID {
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
