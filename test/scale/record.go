//go:build scale

package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
	"github.com/lockedjob/lockedjob/test/scale/measure"
)

// recorder keeps what the watches of one scenario's namespace saw, stamped with the time the
// benchmark saw it: every Job (lock, fence, appeared, finished), every LockedJob's phase, and where
// each guarded Job's guard stood.
type recorder struct {
	mu        sync.Mutex
	runs      map[string]*measure.Run // by Job name
	owners    map[string]string       // Job name -> its LockedJob
	succeeded map[string]bool         // Jobs seen Complete (false: Failed)
	ready     map[string]bool         // Jobs seen with a ready pod
	phases    map[string]batchv1alpha1.LockedJobPhase
	since     map[string]time.Time // when each LockedJob was seen entering its phase
	queued    map[string]time.Time // when each LockedJob was first seen Waiting
	seen      map[string]time.Time // when each LockedJob was first seen
	versions  map[string]int       // how many versions of each LockedJob were seen
	// waiting is when each guarded Job was first seen (created suspended: it waits from then on;
	// the operator writes nothing while it waits), ends when its guard was first seen at an end.
	waiting map[string]time.Time
	ends    map[string]guardEnd
	// admitted counts, per Kueue queue, the Jobs seen unsuspended so far: Kueue hands out no
	// fencing token, so a Kueue Job's run is numbered in the order the benchmark saw Kueue
	// admit it, and only the overlap of runs is checked.
	admitted map[string]int64
	errs     []error
}

// guardEnd is a guarded Job's guard annotation at an end (Released, Lost, Unguarded) and when the
// benchmark first saw it there.
type guardEnd struct {
	state batchv1alpha1.GuardState
	at    time.Time
}

func newRecorder() *recorder {
	return &recorder{
		runs:      map[string]*measure.Run{},
		owners:    map[string]string{},
		succeeded: map[string]bool{},
		ready:     map[string]bool{},
		phases:    map[string]batchv1alpha1.LockedJobPhase{},
		since:     map[string]time.Time{},
		queued:    map[string]time.Time{},
		seen:      map[string]time.Time{},
		versions:  map[string]int{},
		waiting:   map[string]time.Time{},
		ends:      map[string]guardEnd{},
		admitted:  map[string]int64{},
	}
}

func (r *recorder) job(j *batchv1.Job, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	guarded := locks.IsGuardedJob(j)
	if guarded {
		r.guard(j, now)
	}
	run, ok := r.runs[j.Name]
	if !ok {
		if run, ok = r.newRun(j, guarded, now); !ok {
			return
		}
		r.runs[j.Name] = run
	}
	if j.Status.Ready != nil && *j.Status.Ready > 0 {
		r.ready[j.Name] = true
	}
	if !run.Completed.IsZero() {
		return
	}
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			run.Completed, run.CompletedRV = now, resourceVersion(j)
			r.succeeded[j.Name] = c.Type == batchv1.JobComplete
			return
		}
	}
}

// pod stamps when the pod of a recorded Job was first seen Succeeded.
func (r *recorder) pod(p *corev1.Pod, now time.Time) {
	if p.Status.Phase != corev1.PodSucceeded {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if run := r.runs[p.Labels[batchv1.JobNameLabel]]; run != nil && run.PodSucceeded.IsZero() {
		run.PodSucceeded, run.PodSucceededRV = now, resourceVersion(p)
	}
}

// newRun starts the run of a Job seen for the first time, or, for a guarded Job, the first time it
// is seen able to run. A plain Job's lock is its own name; a LockedJob's Job carries its lock and
// fence from its creation. A guarded Job is created suspended and waits until the operator
// unsuspends it under the lock in one write that also carries the fence: its run starts then, and
// it was queued from its creation. Until then ok is false, and nothing but the wait is recorded.
func (r *recorder) newRun(j *batchv1.Job, guarded bool, now time.Time) (run *measure.Run, ok bool) {
	run = &measure.Run{Lock: j.Name, Job: j.Name, Created: now, CreatedRV: resourceVersion(j)}
	fence, fenced := j.Annotations[batchv1alpha1.AnnotationFencingToken]
	if queue := j.Labels[kueuerun.QueueNameLabel]; queue != "" {
		return r.newKueueRun(j, queue, run, now)
	}
	switch {
	case guarded:
		if _, seen := r.waiting[j.Name]; !seen {
			r.waiting[j.Name] = now
		}
		if !fenced || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
			return nil, false // an Unguarded Job never has a run, only its end (guard)
		}
		run.Lock, run.Queued = j.Labels[batchv1alpha1.LabelGuardLock], r.waiting[j.Name]
	case j.Annotations[batchv1alpha1.AnnotationLock] != "":
		run.Lock = j.Annotations[batchv1alpha1.AnnotationLock]
		r.owners[j.Name] = j.Annotations[batchv1alpha1.AnnotationLockedJob]
	default:
		return run, true
	}
	var err error
	if run.Fence, err = strconv.ParseInt(fence, 10, 64); err != nil {
		r.errs = append(r.errs, fmt.Errorf("job %s: fencing token annotation: %w", j.Name, err))
	}
	return run, true
}

// newKueueRun is newRun for a Job in Kueue's queue: created suspended by Kueue's webhook, it waits
// from its creation until Kueue admits it and unsuspends it; its run starts then.
func (r *recorder) newKueueRun(j *batchv1.Job, queue string, run *measure.Run, now time.Time) (*measure.Run, bool) {
	if _, seen := r.waiting[j.Name]; !seen {
		r.waiting[j.Name] = now
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		return nil, false
	}
	r.admitted[queue]++
	run.Lock, run.Queued, run.Fence = queue, r.waiting[j.Name], r.admitted[queue]
	return run, true
}

// guard records when a guarded Job's guard annotation was first seen at an end.
func (r *recorder) guard(j *batchv1.Job, now time.Time) {
	g := batchv1alpha1.GuardState(j.Annotations[batchv1alpha1.AnnotationGuard])
	switch g {
	case batchv1alpha1.GuardReleased, batchv1alpha1.GuardLost, batchv1alpha1.GuardUnguarded:
	default:
		return
	}
	if _, seen := r.ends[j.Name]; !seen {
		r.ends[j.Name] = guardEnd{state: g, at: now}
	}
}

func (r *recorder) lockedJob(lj *batchv1alpha1.LockedJob, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[lj.Name]++
	if _, ok := r.seen[lj.Name]; !ok {
		r.seen[lj.Name] = now
	}
	if r.phases[lj.Name] != lj.Status.Phase {
		r.phases[lj.Name] = lj.Status.Phase
		r.since[lj.Name] = now
	}
	if _, seen := r.queued[lj.Name]; !seen && lj.Status.Phase == batchv1alpha1.PhaseWaiting {
		r.queued[lj.Name] = now
	}
}

// jobsReady counts the Jobs seen with a ready pod.
func (r *recorder) jobsReady() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ready)
}

// plainDone counts Jobs seen Complete and seen Failed, and when the last of them finished.
func (r *recorder) plainDone() (complete, failed int, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, ok := range r.succeeded {
		if ok {
			complete++
		} else {
			failed++
		}
		if t := r.runs[name].Completed; t.After(last) {
			last = t
		}
	}
	return complete, failed, last
}

// guardedDone counts the guarded Jobs that reached the goal, a Job Complete and its lock released
// (guard Released), and those that ended otherwise: Failed and released, or guard Lost or
// Unguarded; and when the last of them was seen so. A Job's end is the later of its condition and
// its guard's: the operator releases only after the Job ended and its pods stopped.
func (r *recorder) guardedDone() (complete, failed int, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, end := range r.ends {
		ok, finished := r.succeeded[name]
		if end.state == batchv1alpha1.GuardReleased && !finished {
			continue // the Job's condition is not seen yet
		}
		if end.state == batchv1alpha1.GuardReleased && ok {
			complete++
		} else {
			failed++
		}
		at := end.at
		if run := r.runs[name]; run != nil && run.Completed.After(at) {
			at = run.Completed
		}
		if at.After(last) {
			last = at
		}
	}
	return complete, failed, last
}

// reached counts LockedJobs in phase and those that ended otherwise (Failed, LockLost), and
// when the last of them entered its phase.
func (r *recorder) reached(phase batchv1alpha1.LockedJobPhase) (in, failed int, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, p := range r.phases {
		switch p {
		case phase:
			in++
		case batchv1alpha1.PhaseFailed, batchv1alpha1.PhaseLockLost:
			failed++
		default:
			continue
		}
		if t := r.since[name]; t.After(last) {
			last = t
		}
	}
	return in, failed, last
}

// lockedJobVersions returns how many versions of each LockedJob were seen up to now.
func (r *recorder) lockedJobVersions() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 0, len(r.versions))
	for _, n := range r.versions {
		out = append(out, n)
	}
	return out
}

func (r *recorder) allRuns() []measure.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]measure.Run, 0, len(r.runs))
	for name, run := range r.runs {
		c := *run
		c.Submitted = run.Created
		if w, ok := r.waiting[name]; ok {
			c.Submitted = w
		}
		if owner := r.owners[name]; owner != "" {
			c.Queued, c.Submitted = r.queued[owner], r.seen[owner]
		}
		out = append(out, c)
	}
	return out
}

func (r *recorder) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d recording errors, first: %w", len(r.errs), r.errs[0])
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// startWatch watches one kind in ns until ctx ends. The first watch is open when it returns, so
// nothing created afterwards is missed; when the API server closes the stream (it does so every
// few minutes) the watch resumes from the last resourceVersion seen.
func startWatch(ctx context.Context, c client.WithWatch, list client.ObjectList, ns string, rec *recorder, handle func(client.Object, time.Time)) error {
	open := func(rv string) (watch.Interface, error) {
		w, err := c.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{
			ResourceVersion: rv, AllowWatchBookmarks: true,
		}})
		if err != nil {
			return nil, fmt.Errorf("watch %T in %s: %w", list, ns, err)
		}
		return w, nil
	}
	w, err := open("")
	if err != nil {
		return err
	}
	go func() {
		rv := drain(ctx, w, rec, handle, "")
		w.Stop()
		for ctx.Err() == nil {
			if w, err = open(rv); err != nil {
				if ctx.Err() == nil {
					rec.fail(err)
				}
				return
			}
			rv = drain(ctx, w, rec, handle, rv)
			w.Stop()
		}
	}()
	return nil
}

// drain handles one watch stream's events and returns the last resourceVersion seen.
func drain(ctx context.Context, w watch.Interface, rec *recorder, handle func(client.Object, time.Time), rv string) string {
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			now := time.Now()
			switch ev.Type {
			case watch.Error:
				// An expired resourceVersion cannot be resumed: start over from a fresh list
				// (the recorder keeps its first sightings) and flag the run, as its history
				// may have a hole.
				rec.fail(fmt.Errorf("watch error: %v", ev.Object))
				return ""
			case watch.Bookmark, watch.Added, watch.Modified, watch.Deleted:
				obj, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				rv = obj.GetResourceVersion()
				if ev.Type != watch.Bookmark && ev.Type != watch.Deleted {
					handle(obj, now)
				}
			}
		}
	}
}

// resourceVersion is the object's resource version as a number (measure.Run), 0 if it is none.
func resourceVersion(o metav1.Object) uint64 {
	rv, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		return 0
	}
	return rv
}
