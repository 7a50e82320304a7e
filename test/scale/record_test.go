//go:build scale

package main

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/kueuerun"
	"github.com/lockedjob/lockedjob/test/scale/measure"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// guardedJob is a guarded Job of lock db as the watch sees it: suspended without a fence until
// the operator unsuspends it, then fenced, then finished, then released.
func guardedJob(name string, suspended bool, fence, guard string, finished bool) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "scale-guarded-shared",
		Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}, Annotations: map[string]string{}}}
	j.Spec.Suspend = ptr.To(suspended)
	if fence != "" {
		j.Annotations[batchv1alpha1.AnnotationFencingToken] = fence
	}
	if guard != "" {
		j.Annotations[batchv1alpha1.AnnotationGuard] = guard
	}
	if finished {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	}
	return j
}

// TestRecorderFollowsGuardedJobs: a guarded Job's run starts when it is seen unsuspended with its
// fence, not when it is created; it was queued from its creation; it reaches the goal only once
// its lock is released; and two of one lock handed over in order are no violation.
func TestRecorderFollowsGuardedJobs(t *testing.T) {
	r := newRecorder()
	held := string(batchv1alpha1.GuardHeld)
	released := string(batchv1alpha1.GuardReleased)
	r.job(guardedJob("a", true, "", "", false), at(0))
	r.job(guardedJob("b", true, "", "", false), at(10))
	r.job(guardedJob("a", false, "7", held, false), at(100))
	r.job(guardedJob("a", false, "7", held, true), at(1200))
	if done, failed, _ := r.guardedDone(); done != 0 || failed != 0 {
		t.Fatalf("before the release: guardedDone = %d done, %d failed; want none", done, failed)
	}
	r.job(guardedJob("a", false, "7", released, true), at(1300))
	r.job(guardedJob("b", false, "8", held, false), at(1350))
	r.job(guardedJob("b", false, "8", held, true), at(2400))
	r.job(guardedJob("b", false, "8", released, true), at(2450))

	done, failed, last := r.guardedDone()
	if done != 2 || failed != 0 || !last.Equal(at(2450)) {
		t.Errorf("guardedDone = %d done, %d failed, last %v; want 2, 0, %v", done, failed, last, at(2450))
	}
	runs := map[string]measure.Run{}
	for _, run := range r.allRuns() {
		runs[run.Job] = run
	}
	want := map[string]measure.Run{
		"a": {Lock: "db", Job: "a", Fence: 7, Created: at(100), Completed: at(1200), Queued: at(0), Submitted: at(0)},
		"b": {Lock: "db", Job: "b", Fence: 8, Created: at(1350), Completed: at(2400), Queued: at(10), Submitted: at(10)},
	}
	for name, w := range want {
		if got := runs[name]; got != w {
			t.Errorf("run %s = %+v, want %+v", name, got, w)
		}
	}
	all := r.allRuns()
	if v := measure.CheckExclusion(all); len(v) != 0 {
		t.Errorf("CheckExclusion = %q, want none", v)
	}
	if g := measure.QueuedHandoffGaps(all); len(g) != 1 || g[0] != 150*time.Millisecond {
		t.Errorf("QueuedHandoffGaps = %v, want [150ms]: b waited from its creation", g)
	}
	if err := r.err(); err != nil {
		t.Errorf("recording errors: %v", err)
	}
}

// TestRecorderCountsAGuardedJobThatNeverHeldAsFailed: a Job the operator marked Unguarded never
// held the lock; it has no run and ends the scenario's wait as failed.
func TestRecorderCountsAGuardedJobThatNeverHeldAsFailed(t *testing.T) {
	r := newRecorder()
	r.job(guardedJob("u", false, "", "", false), at(0))
	r.job(guardedJob("u", false, "", string(batchv1alpha1.GuardUnguarded), false), at(50))
	if done, failed, _ := r.guardedDone(); done != 0 || failed != 1 {
		t.Errorf("guardedDone = %d done, %d failed; want 0, 1", done, failed)
	}
	if runs := r.allRuns(); len(runs) != 0 {
		t.Errorf("runs = %+v, want none: an Unguarded Job never held the lock", runs)
	}
}

// kueueJob is a Job of Kueue queue q as the watch sees it: suspended by Kueue's webhook until
// Kueue admits it, then running, then finished.
func kueueJob(name, q string, suspended, finished bool) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "scale-kueue-shared",
		Labels: map[string]string{kueuerun.QueueNameLabel: q}}}
	j.Spec.Suspend = ptr.To(suspended)
	if finished {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	}
	return j
}

// TestRecorderFollowsKueueJobs: a Job in Kueue's queue runs from when it is seen unsuspended and
// waited from its creation; runs are numbered per queue in the order Kueue admitted them, so two
// of one queue that overlap are a violation and two in turn are a handoff.
func TestRecorderFollowsKueueJobs(t *testing.T) {
	r := newRecorder()
	r.job(kueueJob("a", "q", true, false), at(0))
	r.job(kueueJob("b", "q", true, false), at(10))
	r.job(kueueJob("c", "other", true, false), at(20))
	r.job(kueueJob("a", "q", false, false), at(100))
	r.job(kueueJob("c", "other", false, false), at(110))
	r.job(kueueJob("a", "q", false, true), at(1200))
	r.job(kueueJob("b", "q", false, false), at(1250))
	r.job(kueueJob("b", "q", false, true), at(2300))

	if done, failed, last := r.plainDone(); done != 2 || failed != 0 || !last.Equal(at(2300)) {
		t.Errorf("plainDone = %d done, %d failed, last %v; want 2, 0, %v", done, failed, last, at(2300))
	}
	runs := map[string]measure.Run{}
	for _, run := range r.allRuns() {
		runs[run.Job] = run
	}
	want := map[string]measure.Run{
		"a": {Lock: "q", Job: "a", Fence: 1, Created: at(100), Completed: at(1200), Queued: at(0), Submitted: at(0)},
		"b": {Lock: "q", Job: "b", Fence: 2, Created: at(1250), Completed: at(2300), Queued: at(10), Submitted: at(10)},
		"c": {Lock: "other", Job: "c", Fence: 1, Created: at(110), Queued: at(20), Submitted: at(20)},
	}
	for name, w := range want {
		if got := runs[name]; got != w {
			t.Errorf("run %s = %+v, want %+v", name, got, w)
		}
	}
	all := r.allRuns()
	if v := measure.CheckExclusion(all); len(v) != 0 {
		t.Errorf("CheckExclusion = %q, want none", v)
	}
	if g := measure.QueuedHandoffGaps(all); len(g) != 1 || g[0] != 50*time.Millisecond {
		t.Errorf("QueuedHandoffGaps = %v, want [50ms]", g)
	}
	if d := measure.StartDelays(all); len(d) != 3 || slices.Max(d) != 1240*time.Millisecond {
		t.Errorf("StartDelays = %v, want 3 with b's 1.24s (created at 10ms, admitted at 1250ms) the longest", d)
	}

	// Kueue admitting a second Job of q while the first still runs is two holders at once.
	r = newRecorder()
	r.job(kueueJob("a", "q", false, false), at(0))
	r.job(kueueJob("b", "q", false, false), at(10))
	if v := measure.CheckExclusion(r.allRuns()); len(v) != 1 {
		t.Errorf("CheckExclusion of two runs of one queue at once = %q, want one violation", v)
	}
}
