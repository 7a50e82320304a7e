package testkit

import (
	"maps"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// JobRecord is one Job as a Recorder saw it. Each stamp is the test's clock when the watch event
// that first showed the transition arrived; zero means not seen.
type JobRecord struct {
	Namespace, Name, UID string
	LockedJob            string // the LockedJob annotation: the full name, which a label may not hold
	// Guarded: a guarded Job (locks.IsGuardedJob), which asks for its lock by label and gets its
	// fence when the operator unsuspends it.
	Guarded bool
	Fence   int64 // the fencing-token annotation, as first seen with one (a guarded Job's comes with its unsuspension)
	Slot    int   // the semaphore slot annotation (0 without)
	Added   time.Time
	// Unsuspended is when the Job was first seen not suspended: when its pods may start. A
	// LockedJob's Job is created so; a guarded Job is created suspended by the admission gate, and
	// this is the operator's unsuspend write, which also carries the fence.
	Unsuspended time.Time
	Complete    time.Time // condition Complete=True
	Failed      time.Time // condition Failed=True
	Suspended   time.Time // spec.suspend=true, after the Job was seen unsuspended
	Deleted     time.Time
	// GuardSeen is when each value of a guarded Job's guard annotation (Held, Released, Lost, …)
	// was first seen.
	GuardSeen map[batchv1alpha1.GuardState]time.Time
	Job       *batchv1.Job // the latest version seen
}

// Finished is when the Job was first seen Complete or, failing that, Failed (zero if neither).
func (j JobRecord) Finished() time.Time {
	if !j.Complete.IsZero() {
		return j.Complete
	}
	return j.Failed
}

// Ended is the first of Complete, Failed, Suspended and Deleted: from then on the Job's pods no
// longer run by the Job's will (a suspended or deleted Job's pods are being stopped).
func (j JobRecord) Ended() time.Time { return earliest(j.Complete, j.Failed, j.Suspended, j.Deleted) }

// Guard is the guard annotation as last seen ("" for a Job without one).
func (j JobRecord) Guard() batchv1alpha1.GuardState {
	if j.Job == nil {
		return ""
	}
	return batchv1alpha1.GuardState(j.Job.Annotations[batchv1alpha1.AnnotationGuard])
}

// PodRecord is one pod as a Recorder saw it, stamped like JobRecord.
type PodRecord struct {
	Namespace, Name, UID string
	Job                  string // the job-name label
	JobUID               string // the controlling batch/v1 Job's UID; "" for a Pod no Job controls
	Fence                int64  // the pod's fencing-token annotation (0 without)
	Slot                 int    // the pod's slot annotation
	HasSlot              bool   // the pod carries the slot annotation
	Added                time.Time
	Running              time.Time
	Succeeded            time.Time
	Failed               time.Time
	Terminating          time.Time // deletionTimestamp first seen
	Deleted              time.Time
	Pod                  *corev1.Pod // the latest version seen
}

// Stopped is when the pod was first seen Succeeded or Failed (zero if neither).
func (p PodRecord) Stopped() time.Time { return earliest(p.Succeeded, p.Failed) }

// Settled reports whether the pod has stopped or is gone. A terminating pod still runs (its
// containers get SIGTERM and a grace period), so it is not settled until it is deleted.
func (p PodRecord) Settled() bool { return !p.Stopped().IsZero() || !p.Deleted.IsZero() }

// RunsNow reports whether the pod was seen Running and has not settled since.
func (p PodRecord) RunsNow() bool { return !p.Running.IsZero() && !p.Settled() }

// History is what a Recorder saw, in the order each object was first seen.
type History struct {
	Jobs []JobRecord
	Pods []PodRecord
}

// InNamespace is the part of h in namespace.
func (h History) InNamespace(namespace string) History {
	var out History
	for _, j := range h.Jobs {
		if j.Namespace == namespace {
			out.Jobs = append(out.Jobs, j)
		}
	}
	for _, p := range h.Pods {
		if p.Namespace == namespace {
			out.Pods = append(out.Pods, p)
		}
	}
	return out
}

// Job returns the first Job seen with that name (a record with only the name if none was).
func (h History) Job(name string) JobRecord {
	for _, j := range h.Jobs {
		if j.Name == name {
			return j
		}
	}
	return JobRecord{Name: name}
}

// WorkEnded is when the named Job's work was first seen over: the last of its pods seen stopped,
// which is when a LockedJob's lock may go (before the Job's condition, see docs/design.md, "Release
// at the outcome"); for a Job without pods seen, its condition (zero if neither was seen).
func (h History) WorkEnded(job string) time.Time {
	var end time.Time
	for _, p := range h.PodsOf(job) {
		stopped := p.Stopped()
		if stopped.IsZero() {
			return time.Time{} // a pod still runs
		}
		if stopped.After(end) {
			end = stopped
		}
	}
	if end.IsZero() {
		return h.Job(job).Finished()
	}
	return end
}

// JobByUID returns the Job with that UID.
func (h History) JobByUID(uid string) (JobRecord, bool) {
	for _, j := range h.Jobs {
		if j.UID == uid {
			return j, true
		}
	}
	return JobRecord{}, false
}

// JobsOf returns the Jobs created for the LockedJob named lockedJob.
func (h History) JobsOf(lockedJob string) []JobRecord {
	return slices.DeleteFunc(slices.Clone(h.Jobs), func(j JobRecord) bool { return j.LockedJob != lockedJob })
}

// PodsOf returns the pods of the named Job, oldest first.
func (h History) PodsOf(job string) []PodRecord {
	out := slices.DeleteFunc(slices.Clone(h.Pods), func(p PodRecord) bool { return p.Job != job })
	slices.SortStableFunc(out, func(a, b PodRecord) int { return a.Added.Compare(b.Added) })
	return out
}

// PodsGone returns when the last pod of job was seen deleted, and whether all its pods (at least
// one) are gone.
func (h History) PodsGone(job string) (time.Time, bool) {
	pods := h.PodsOf(job)
	if len(pods) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for _, p := range pods {
		if p.Deleted.IsZero() {
			return time.Time{}, false
		}
		if p.Deleted.After(last) {
			last = p.Deleted
		}
	}
	return last, true
}

// journal holds the records by UID, in the order first seen. It is the Recorder's state without
// the watches, so what a watch event does to a record is tested without a cluster.
type journal struct {
	jobs    map[string]*JobRecord
	pods    map[string]*PodRecord
	jobUIDs []string
	podUIDs []string
}

func newJournal() *journal {
	return &journal{jobs: map[string]*JobRecord{}, pods: map[string]*PodRecord{}}
}

func (r *journal) onJob(t watch.EventType, job *batchv1.Job, now time.Time) {
	rec, ok := r.jobs[string(job.UID)]
	if !ok {
		rec = &JobRecord{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID),
			LockedJob: job.Annotations[batchv1alpha1.AnnotationLockedJob], Guarded: locks.IsGuardedJob(job), Added: now}
		r.jobs[rec.UID] = rec
		r.jobUIDs = append(r.jobUIDs, rec.UID)
	}
	rec.Job = job
	if rec.Fence == 0 {
		rec.Fence = fenceOf(job.Annotations)
		rec.Slot, _ = slotOf(job.Annotations)
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			stamp(&rec.Complete, now)
		case batchv1.JobFailed:
			stamp(&rec.Failed, now)
		}
	}
	suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
	switch {
	case !suspended:
		stamp(&rec.Unsuspended, now)
	case !rec.Unsuspended.IsZero():
		stamp(&rec.Suspended, now)
	}
	if g := batchv1alpha1.GuardState(job.Annotations[batchv1alpha1.AnnotationGuard]); g != "" {
		if rec.GuardSeen == nil {
			rec.GuardSeen = map[batchv1alpha1.GuardState]time.Time{}
		}
		if _, seen := rec.GuardSeen[g]; !seen {
			rec.GuardSeen[g] = now
		}
	}
	if t == watch.Deleted {
		stamp(&rec.Deleted, now)
	}
}

func (r *journal) onPod(t watch.EventType, pod *corev1.Pod, now time.Time) {
	rec, ok := r.pods[string(pod.UID)]
	if !ok {
		rec = &PodRecord{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
			Job: pod.Labels[batchv1.JobNameLabel], Fence: fenceOf(pod.Annotations), Added: now}
		rec.Slot, rec.HasSlot = slotOf(pod.Annotations)
		if ref := locks.JobControllerOf(pod); ref != nil {
			rec.JobUID = string(ref.UID) // a Workflow's or TaskRun's step Pod has none
		}
		r.pods[rec.UID] = rec
		r.podUIDs = append(r.podUIDs, rec.UID)
	}
	rec.Pod = pod
	switch pod.Status.Phase {
	case corev1.PodRunning:
		stamp(&rec.Running, now)
	case corev1.PodSucceeded:
		stamp(&rec.Succeeded, now)
	case corev1.PodFailed:
		stamp(&rec.Failed, now)
	}
	if pod.DeletionTimestamp != nil {
		stamp(&rec.Terminating, now)
	}
	if t == watch.Deleted {
		stamp(&rec.Deleted, now)
	}
}

// history copies the records: the caller may read them while the watches go on.
func (r *journal) history() History {
	h := History{Jobs: make([]JobRecord, 0, len(r.jobUIDs)), Pods: make([]PodRecord, 0, len(r.podUIDs))}
	for _, uid := range r.jobUIDs {
		j := *r.jobs[uid]
		j.GuardSeen = maps.Clone(j.GuardSeen) // the watches go on writing the journal's map
		h.Jobs = append(h.Jobs, j)
	}
	for _, uid := range r.podUIDs {
		h.Pods = append(h.Pods, *r.pods[uid])
	}
	return h
}

// stamp keeps the first time a transition was seen.
func stamp(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

func earliest(ts ...time.Time) time.Time {
	var first time.Time
	for _, t := range ts {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

func fenceOf(annotations map[string]string) int64 {
	f, _ := strconv.ParseInt(annotations[batchv1alpha1.AnnotationFencingToken], 10, 64)
	return f
}

// slotOf reads the semaphore slot a Job or pod runs in; ok is false without the annotation.
func slotOf(annotations map[string]string) (slot int, ok bool) {
	v, ok := annotations[batchv1alpha1.AnnotationSlot]
	if !ok {
		return 0, false
	}
	slot, err := strconv.Atoi(v)
	return slot, err == nil
}
