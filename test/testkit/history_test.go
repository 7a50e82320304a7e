package testkit

import (
	"maps"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func testJob(name string, conds ...batchv1.JobConditionType) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Annotations: map[string]string{batchv1alpha1.AnnotationLockedJob: "lj", batchv1alpha1.AnnotationFencingToken: "7",
			batchv1alpha1.AnnotationSlot: "1"}}}
	for _, c := range conds {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return j
}

func testPod(name string, job *batchv1.Job, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{batchv1.JobNameLabel: job.Name}}}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}
	p.Status.Phase = phase
	return p
}

// TestJournalStampsFirstTransitions: every stamp is the first event that showed its transition,
// and later events (a relist repeats them) do not move it.
func TestJournalStampsFirstTransitions(t *testing.T) {
	r := newJournal()
	r.onJob(watch.Added, testJob("a"), at(0))
	r.onJob(watch.Modified, testJob("a", batchv1.JobComplete), at(100))
	r.onJob(watch.Modified, testJob("a", batchv1.JobComplete), at(200))
	r.onJob(watch.Deleted, testJob("a", batchv1.JobComplete), at(300))
	suspended := testJob("s")
	suspended.Spec.Suspend = ptr.To(true)
	r.onJob(watch.Added, testJob("s"), at(10))
	r.onJob(watch.Modified, suspended, at(50))

	pod := testPod("a-1", testJob("a"), corev1.PodPending)
	r.onPod(watch.Added, pod, at(20))
	r.onPod(watch.Modified, testPod("a-1", testJob("a"), corev1.PodRunning), at(40))
	terminating := testPod("a-1", testJob("a"), corev1.PodRunning)
	terminating.DeletionTimestamp = &metav1.Time{Time: at(60)}
	r.onPod(watch.Modified, terminating, at(60))
	r.onPod(watch.Modified, testPod("a-1", testJob("a"), corev1.PodSucceeded), at(90))
	r.onPod(watch.Deleted, testPod("a-1", testJob("a"), corev1.PodSucceeded), at(95))

	h := r.history()
	a := h.Job("a")
	if a.Added != at(0) || a.Complete != at(100) || a.Deleted != at(300) || !a.Failed.IsZero() || !a.Suspended.IsZero() {
		t.Errorf("Job a stamped %+v", a)
	}
	if a.LockedJob != "lj" || a.Fence != 7 || a.Slot != 1 || a.Job == nil {
		t.Errorf("Job a annotations read as lockedJob=%q fence=%d slot=%d (object %v)", a.LockedJob, a.Fence, a.Slot, a.Job != nil)
	}
	if a.Finished() != at(100) || a.Ended() != at(100) {
		t.Errorf("Job a finished %v, ended %v; want both at its Complete", a.Finished(), a.Ended())
	}
	s := h.Job("s")
	if !s.Finished().IsZero() || s.Ended() != at(50) {
		t.Errorf("suspended Job finished %v, ended %v; want not finished, ended when suspended", s.Finished(), s.Ended())
	}
	p := h.PodsOf("a")
	if len(p) != 1 {
		t.Fatalf("pods of a: %+v", p)
	}
	if p[0].JobUID != "uid-a" || p[0].Running != at(40) || p[0].Terminating != at(60) || p[0].Stopped() != at(90) || p[0].Deleted != at(95) {
		t.Errorf("pod stamped %+v (stopped %v)", p[0], p[0].Stopped())
	}
	if h.WorkEnded("a") != at(90) {
		t.Errorf("Job a's work ended %v; want its pod's stop, before the Job's Complete", h.WorkEnded("a"))
	}
	if p[0].HasSlot || p[0].Fence != 0 {
		t.Errorf("pod without annotations reads slot %v, fence %d", p[0].HasSlot, p[0].Fence)
	}
}

// TestJournalFollowsAGuardedJob: a guarded Job is created suspended and without a fence; its
// unsuspension (which carries the fence) is when its pods may start, a suspension only after it
// counts as its end, and each guard state is stamped when first seen.
func TestJournalFollowsAGuardedJob(t *testing.T) {
	guarded := func(suspend bool, guard string, fence string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "uid-g",
			Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}, Annotations: map[string]string{}}}
		j.Spec.Suspend = ptr.To(suspend)
		if guard != "" {
			j.Annotations[batchv1alpha1.AnnotationGuard] = guard
		}
		if fence != "" {
			j.Annotations[batchv1alpha1.AnnotationFencingToken] = fence
		}
		return j
	}
	r := newJournal()
	r.onJob(watch.Added, guarded(true, "", ""), at(0))
	r.onJob(watch.Modified, guarded(true, "", ""), at(50)) // a waiter's Job changes nothing
	r.onJob(watch.Modified, guarded(false, "Held", "42"), at(100))
	r.onJob(watch.Modified, guarded(true, "Held", "42"), at(300))
	r.onJob(watch.Modified, guarded(true, "Lost", "42"), at(350))
	r.onJob(watch.Modified, guarded(true, "Lost", "42"), at(400))

	g := r.history().Job("g")
	if !g.Guarded || g.LockedJob != "" {
		t.Errorf("guarded %v, LockedJob %q; want a guarded Job of no LockedJob", g.Guarded, g.LockedJob)
	}
	if g.Added != at(0) || g.Unsuspended != at(100) || g.Suspended != at(300) || g.Ended() != at(300) {
		t.Errorf("stamped added %v, unsuspended %v, suspended %v, ended %v; want 0, 100, 300, 300 ms",
			g.Added, g.Unsuspended, g.Suspended, g.Ended())
	}
	if g.Fence != 42 {
		t.Errorf("fence %d, want the one its unsuspension carried (42)", g.Fence)
	}
	want := map[batchv1alpha1.GuardState]time.Time{batchv1alpha1.GuardHeld: at(100), batchv1alpha1.GuardLost: at(350)}
	if !maps.Equal(g.GuardSeen, want) || g.Guard() != batchv1alpha1.GuardLost {
		t.Errorf("guard seen %v, last %q; want %v, Lost", g.GuardSeen, g.Guard(), want)
	}
	h := r.history()
	r.onJob(watch.Modified, guarded(true, "Released", "42"), at(500))
	if _, ok := h.Jobs[0].GuardSeen[batchv1alpha1.GuardReleased]; ok {
		t.Error("a History taken before a transition changed with it: it shares the journal's map")
	}
}

func TestPodSettledAndRunsNow(t *testing.T) {
	cases := map[string]struct {
		pod              PodRecord
		settled, runsNow bool
	}{
		"pending":                {pod: PodRecord{Added: at(0)}},
		"running":                {pod: PodRecord{Running: at(1)}, runsNow: true},
		"terminating still runs": {pod: PodRecord{Running: at(1), Terminating: at(2)}, runsNow: true},
		"succeeded":              {pod: PodRecord{Running: at(1), Succeeded: at(2)}, settled: true},
		"failed":                 {pod: PodRecord{Running: at(1), Failed: at(2)}, settled: true},
		"deleted before it ran":  {pod: PodRecord{Deleted: at(2)}, settled: true},
		"deleted while running":  {pod: PodRecord{Running: at(1), Deleted: at(2)}, settled: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.pod.Settled(); got != tc.settled {
				t.Errorf("Settled() = %v, want %v", got, tc.settled)
			}
			if got := tc.pod.RunsNow(); got != tc.runsNow {
				t.Errorf("RunsNow() = %v, want %v", got, tc.runsNow)
			}
		})
	}
}

func TestHistoryQueries(t *testing.T) {
	h := History{
		Jobs: []JobRecord{
			{Namespace: "ns", Name: "a-1", UID: "u1", LockedJob: "a"},
			{Namespace: "other", Name: "a-1", UID: "u9", LockedJob: "a"},
			{Namespace: "ns", Name: "b-1", UID: "u2", LockedJob: "b"},
		},
		Pods: []PodRecord{
			{Namespace: "ns", Name: "a-1-y", Job: "a-1", Added: at(20), Deleted: at(90)},
			{Namespace: "ns", Name: "a-1-x", Job: "a-1", Added: at(10), Deleted: at(80)},
			{Namespace: "ns", Name: "b-1-x", Job: "b-1", Added: at(30)},
		},
	}
	ns := h.InNamespace("ns")
	if len(ns.Jobs) != 2 || len(ns.Pods) != 3 {
		t.Errorf("InNamespace(ns) has %d Jobs and %d pods, want 2 and 3", len(ns.Jobs), len(ns.Pods))
	}
	if got := ns.JobsOf("a"); len(got) != 1 || got[0].UID != "u1" {
		t.Errorf("JobsOf(a) = %+v", got)
	}
	if j, ok := h.JobByUID("u9"); !ok || j.Namespace != "other" {
		t.Errorf("JobByUID(u9) = %+v, %v", j, ok)
	}
	if j := h.Job("never"); j.Name != "never" || !j.Added.IsZero() {
		t.Errorf("Job(never) = %+v, want a record with only the name", j)
	}
	if pods := h.PodsOf("a-1"); len(pods) != 2 || pods[0].Name != "a-1-x" {
		t.Errorf("PodsOf(a-1) = %+v, want a-1-x first (added first)", pods)
	}
	if end := h.WorkEnded("b-1"); !end.IsZero() {
		t.Errorf("WorkEnded(b-1) = %v while its pod runs", end)
	}
	if gone, ok := h.PodsGone("a-1"); !ok || gone != at(90) {
		t.Errorf("PodsGone(a-1) = %v, %v; want the last deletion", gone, ok)
	}
	if _, ok := h.PodsGone("b-1"); ok {
		t.Error("PodsGone(b-1) with its pod still there")
	}
	if _, ok := h.PodsGone("none"); ok {
		t.Error("PodsGone of a Job without pods")
	}
}
