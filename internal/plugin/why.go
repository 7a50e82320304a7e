package plugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
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

type whyOptions struct {
	output string
	events int
}

func newWhyCommand(s *session) *cobra.Command {
	o := &whyOptions{}
	cmd := &cobra.Command{
		Use:   "why NAME",
		Short: "Say why a LockedJob waits, or how it ended, in plain sentences",
		Long: `Explain one LockedJob: its phase; while it waits, who holds the lock and for how long (for a
semaphore, how many of its permits are in use and each holder's slot), its place in line and the
waiters ahead of it with their priorities (in the order the operator's queue serves them: priority,
then age), or that its Lock declares more permits than the operator's Redlock can grant; while it
runs, its slot of a semaphore, its fencing token and its Job; once finished, how it ended. Then its
last Events.`,
		Example: `  kubectl lockedjob why migrate-orders
  kubectl lockedjob why migrate-orders -n batch -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), s, args[0])
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (sentences by default).")
	cmd.Flags().IntVar(&o.events, "events", 5, "How many of the last Events to show (0 for none).")
	return cmd
}

func (o *whyOptions) run(ctx context.Context, s *session, name string) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	c, err := s.client()
	if err != nil {
		return err
	}
	namespace, err := s.namespace()
	if err != nil {
		return err
	}
	e, warnings, err := explain(ctx, c, client.ObjectKey{Namespace: namespace, Name: name}, o.events)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		say(s.streams.ErrOut, "Warning: %s\n", w)
	}
	if o.output != "" {
		return printStructured(s.streams.Out, o.output, e)
	}
	return e.write(s.streams.Out, s.now())
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
		if locks.QueueCompare(w, lj) >= 0 {
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

// semaphore reports whether the lock admits several holders, or still has one above slot 0 after
// its permits were lowered: then the sentences name slots.
func (e *Explanation) semaphore() bool {
	return e.Permits > 1 || slotsAbove0(e.Holders) || (e.Slot != nil && *e.Slot > 0)
}

// bucketPattern finds the bucket of a waiter far back in line in its status message, the one place
// the operator records it (controllers/wait.go: "position >N in queue").
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

// write says the explanation in sentences, then lists the Events.
func (e *Explanation) write(out io.Writer, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "LockedJob %s/%s runs under lock %s (scope %s, priority %d).\n", e.Namespace, e.Name, e.Lock, e.Scope, e.Priority)
	switch {
	case e.Ending != nil:
		e.writeEnding(&b, now)
	case e.Phase == batchv1alpha1.PhaseWaiting:
		e.writeWaiting(&b, now)
	case e.Phase == batchv1alpha1.PhaseRunning:
		e.writeRunning(&b, now)
	default:
		phase := cmp.Or(string(e.Phase), "not yet reconciled")
		fmt.Fprintf(&b, "It is %s: it has not asked for the lock yet.", phase)
		if e.Message != "" {
			fmt.Fprintf(&b, " %s.", strings.TrimSuffix(e.Message, "."))
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	return e.writeEvents(out, now)
}

func (e *Explanation) writeWaiting(b *strings.Builder, now time.Time) {
	if e.PermitsUnsupported {
		e.writePermitsUnsupported(b)
		return
	}
	b.WriteString("It is Waiting.")
	cluster := e.Scope == batchv1alpha1.LockScopeCluster
	if e.semaphore() {
		e.writeSemaphoreHolders(b, now)
	} else {
		e.writeHolder(b, now)
	}
	switch p := e.Place; {
	case p == nil:
		b.WriteString("Its place in line is not known yet.\n")
	case p.Exact > 0:
		next := ""
		if p.Exact == 1 {
			next = " (next)"
		}
		fmt.Fprintf(b, "It is number %d in line%s.\n", p.Exact, next)
	default:
		fmt.Fprintf(b, "It is further back than number %d in line (exact places are shown for the first 3 only).\n", p.MoreThan)
	}
	if len(e.Ahead) == 0 {
		b.WriteString("No waiter of this lock is ahead of it.\n")
		return
	}
	fmt.Fprintf(b, "%d ahead of it, in the order the queue serves them (higher priority first, then older):\n", len(e.Ahead))
	for i, w := range e.Ahead {
		fmt.Fprintf(b, "  %d. %s, priority %d", i+1, ref(w.Namespace, w.Name, cluster || w.Namespace != e.Namespace), w.Priority)
		if w.WaitingSince != nil {
			fmt.Fprintf(b, ", waiting for %s", since(now, w.WaitingSince))
		}
		b.WriteString("\n")
	}
}

// writeHolder names the one holder of a plain lock.
func (e *Explanation) writeHolder(b *strings.Builder, now time.Time) {
	switch h := e.Holder; {
	case h == nil:
		b.WriteString(" The holder is not named in its status: waiters far back in line are not told it.")
	case h.Name == "":
		fmt.Fprintf(b, " The lock is held by %s (no LockedJob you can read).", h.Identity)
	default:
		fmt.Fprintf(b, " The lock is held by %s", holderCell(h, e.Scope == batchv1alpha1.LockScopeCluster || h.Namespace != e.Namespace, false))
		if h.AcquiredAt != nil {
			fmt.Fprintf(b, ", which has held it for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
		}
		b.WriteString(".")
	}
	b.WriteString("\n")
}

// writeSemaphoreHolders says how many of the lock's permits are in use and lists the holders by
// slot, one a line, as its status tells. A holder only Redis names (at this waiter's last attempt)
// is one of them, not a count.
func (e *Explanation) writeSemaphoreHolders(b *strings.Builder, now time.Time) {
	switch {
	case len(e.Holders) == 1 && e.Holders[0].Name == "":
		fmt.Fprintf(b, " %s; at its last attempt Redis named %s (no LockedJob you can read) as a holder.\n", e.permitsPhrase(), e.Holders[0].Identity)
		return
	case len(e.Holders) == 0:
		fmt.Fprintf(b, " %s; no LockedJob you can read holds it.\n", e.permitsPhrase())
		return
	}
	fmt.Fprintf(b, " %s, by:\n", e.inUsePhrase())
	cluster := e.Scope == batchv1alpha1.LockScopeCluster
	for i := range e.Holders {
		h := &e.Holders[i]
		b.WriteString("  ")
		if h.Slot != nil {
			fmt.Fprintf(b, "slot %d: ", *h.Slot)
		}
		b.WriteString(holderCell(h, cluster || h.Namespace != e.Namespace, false))
		if h.AcquiredAt != nil {
			fmt.Fprintf(b, ", holding for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
}

// permitsPhrase is "The lock has 3 permits", or, when its Lock could not be read, that the number
// is unknown.
func (e *Explanation) permitsPhrase() string {
	if e.Permits == 0 {
		return "The lock is a semaphore whose number of permits is not known (its Lock could not be read)"
	}
	return fmt.Sprintf("The lock has %d permits", e.Permits)
}

// inUsePhrase is "2 of the lock's 3 permits are in use", or without the 3 when the number is
// unknown.
func (e *Explanation) inUsePhrase() string {
	verb := "are"
	if e.InUse == 1 {
		verb = "is"
	}
	if e.Permits == 0 {
		return fmt.Sprintf("%d of the lock's permits (how many it has is not known: its Lock could not be read) %s in use", e.InUse, verb)
	}
	return fmt.Sprintf("%d of the lock's %d permits %s in use", e.InUse, e.Permits, verb)
}

// writePermitsUnsupported explains a waiter the operator does not queue at all: its lock declares
// more permits than Redlock can grant (controllers.waitForPermits).
func (e *Explanation) writePermitsUnsupported(b *strings.Builder) {
	kind := sourceLock
	if e.Scope == batchv1alpha1.LockScopeCluster {
		kind = sourceClusterLock
	}
	declares := "more than one permit"
	if e.Permits > 1 {
		declares = fmt.Sprintf("%d permits", e.Permits)
	}
	fmt.Fprintf(b, "It is Waiting, and cannot acquire the lock as things stand: the %s %s declares %s (a semaphore), "+
		"and the operator's Redis is Redlock, which admits one holder per lock.\n", kind, e.Lock, declares)
	fmt.Fprintf(b, "It is not in the lock's queue. It waits until the %s declares 1 permit (spec.permits), or the operator "+
		"uses a Redis that is not Redlock (a single server, Sentinel or Redis Cluster).\n", kind)
}

func (e *Explanation) writeRunning(b *strings.Builder, now time.Time) {
	b.WriteString("It is Running: it holds the lock")
	if e.Slot != nil && e.semaphore() {
		fmt.Fprintf(b, " in slot %d", *e.Slot)
	}
	if e.FencingToken != nil {
		fmt.Fprintf(b, " with fencing token %d", *e.FencingToken)
	}
	if h := e.Holder; h != nil && h.AcquiredAt != nil {
		fmt.Fprintf(b, " and has held it for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
	}
	b.WriteString(".\n")
	if e.semaphore() {
		fmt.Fprintf(b, "%s.\n", e.inUsePhrase())
	}
	if j := e.Job; j != nil {
		e.writeJob(b, j)
	}
	if e.Behind > 0 {
		fmt.Fprintf(b, "%d waiting for the lock after it.\n", e.Behind)
	}
}

func (e *Explanation) writeJob(b *strings.Builder, j *JobState) {
	if !j.Exists {
		fmt.Fprintf(b, "Its Job %s is gone.\n", j.Name)
		return
	}
	fmt.Fprintf(b, "Its Job %s has %d active, %d succeeded and %d failed pods.\n", j.Name, j.Active, j.Succeeded, j.Failed)
}

func (e *Explanation) writeEnding(b *strings.Builder, now time.Time) {
	end := e.Ending
	fmt.Fprintf(b, "It ended %s %s ago (%s), reason %s", end.Phase, since(now, &end.At), end.At.UTC().Format(time.RFC3339), end.Reason)
	if end.Message != "" {
		fmt.Fprintf(b, ": %s", strings.TrimSuffix(end.Message, "."))
	}
	b.WriteString(".\n")
	if e.FencingToken != nil {
		fmt.Fprintf(b, "It ran with fencing token %d.\n", *e.FencingToken)
	}
	if j := e.Job; j != nil {
		e.writeJob(b, j)
	}
}

func (e *Explanation) writeEvents(out io.Writer, now time.Time) error {
	if len(e.Events) == 0 {
		_, err := fmt.Fprintln(out, "No Events (the API server keeps them for an hour by default).")
		return err
	}
	var rows strings.Builder
	rows.WriteString("Last Events:\n  AGE\tTYPE\tREASON\tMESSAGE\n")
	for _, ev := range e.Events {
		age := since(now, &ev.At)
		if ev.Count > 1 {
			age = fmt.Sprintf("%s (x%d)", age, ev.Count)
		}
		fmt.Fprintf(&rows, "  %s\t%s\t%s\t%s\n", age, ev.Type, ev.Reason, ev.Note)
	}
	return writeTable(out, rows.String())
}
