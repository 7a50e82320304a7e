package fault

import (
	"strings"
	"testing"
	"time"
)

// The checker must be able to fail: each case below is a history with one
// known flaw (or none), built by hand, and the checker must name exactly it.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func pod(cluster, lj, uid string, fence int64, startMS, endMS int) podSpan {
	return podSpan{Cluster: cluster, Namespace: "ns", Name: lj + "-pod", Job: lj + "-job", JobUID: uid, Claimant: lj,
		Fence: fence, JobFence: fence, Start: at(startMS), End: at(endMS)}
}

func job(cluster, lj, uid string, fence int64, addedMS, finishedMS int) jobEntry {
	return jobEntry{Cluster: cluster, Namespace: "ns", Name: lj + "-job", UID: uid, Claimant: lj, Fence: fence,
		Added: at(addedMS), Finished: at(finishedMS)}
}

func lockedJob(cluster, name, phase string, terminalMS int) claimantEntry {
	return claimantEntry{Cluster: cluster, Namespace: "ns", Name: name, Phase: phase, TerminalAt: at(terminalMS)}
}

// clean is two holders, one after the other, from two clusters.
func clean() history {
	return history{
		Pods:          []podSpan{pod("a", "x", "u1", 10, 100, 2000), pod("b", "y", "u2", 11, 2500, 4000)},
		Jobs:          []jobEntry{job("a", "x", "u1", 10, 0, 2000), job("b", "y", "u2", 11, 2300, 4000)},
		Claimants:     []claimantEntry{lockedJob("a", "x", "Succeeded", 2100), lockedJob("b", "y", "Succeeded", 4100)},
		HealedAt:      t0,
		TerminalBound: 10 * time.Second,
	}
}

func TestCheckerCleanHistoryPasses(t *testing.T) {
	v := check("clean", clean(), false)
	if v.Failed() || v.Overlaps != 0 || v.StaleAccepted != 0 || v.StaleRejected != 0 || !v.Monotonic || !v.AllTerminal {
		t.Fatalf("clean history judged %+v", v)
	}
	if v.TerminalWithin != 4100*time.Millisecond {
		t.Errorf("terminal within = %s, want 4.1s", v.TerminalWithin)
	}
}

func TestCheckerOverlapFailsOnlyWhereNotAllowed(t *testing.T) {
	h := clean()
	h.Pods[1].Start = at(1500) // y runs 500 ms beside x, with a higher fence
	h.Jobs[1].Added = at(1300)
	h.Claimants[0].Phase = "LockLost"
	strict := check("partition", h, false)
	if strict.Overlaps != 1 || strict.LongestOverlap != 500*time.Millisecond {
		t.Fatalf("overlap = %d longest %s, want 1 and 500ms", strict.Overlaps, strict.LongestOverlap)
	}
	if !strict.Failed() || !strings.Contains(strings.Join(strict.Failures, ";"), "overlap") {
		t.Fatalf("an overlap with the operator alive must fail: %v", strict.Failures)
	}
	// x's writes from 1500 on come after y's fence 11: rejected, not accepted.
	if strict.StaleAccepted != 0 || strict.StaleRejected == 0 {
		t.Errorf("stale accepted %d rejected %d, want 0 and > 0", strict.StaleAccepted, strict.StaleRejected)
	}
	if allowed := check("kill", h, true); allowed.Failed() {
		t.Fatalf("an overlap where a process was killed is reported, not failed: %v", allowed.Failures)
	}
}

func TestCheckerStaleWriteAcceptedOnRepeatedToken(t *testing.T) {
	h := clean()
	// y got the same token as x (a failover that lost the INCR): the store
	// cannot tell them apart.
	h.Pods[1].Fence, h.Pods[1].JobFence, h.Jobs[1].Fence = 10, 10, 10
	v := check("failover", h, true)
	if v.StaleAccepted == 0 {
		t.Fatal("a second writer with the same token was not counted as a stale write accepted")
	}
	if v.Monotonic {
		t.Error("equal fences were judged strictly increasing")
	}
	if !v.Failed() {
		t.Error("stale writes accepted must fail even where overlaps are allowed")
	}
}

func TestCheckerDuplicateJobOfOneLockedJob(t *testing.T) {
	h := clean()
	// x's Job was deleted out of band and created again: same name, same
	// fence, new UID.
	h.Jobs = append(h.Jobs, job("a", "x", "u3", 10, 2100, 3000))
	h.Pods = append(h.Pods, pod("a", "x", "u3", 10, 2200, 2400))
	v := check("job-deleted", h, false)
	if v.DuplicateJobs != 1 {
		t.Fatalf("duplicate Jobs = %d, want 1", v.DuplicateJobs)
	}
	if v.StaleAccepted == 0 {
		t.Error("the second run under one token was accepted by the store without being counted")
	}
	if !v.Failed() {
		t.Error("a duplicate Job must fail")
	}
}

func TestCheckerSucceededAlthoughTaken(t *testing.T) {
	h := clean()
	h.Jobs[1].Added = at(1000) // y acquired while x still ran; x still says Succeeded
	h.Pods[1].Start = at(2100)
	v := check("pause", h, true)
	if len(v.SucceededTaken) != 1 || !v.Failed() {
		t.Fatalf("Succeeded-though-taken = %v, failures %v", v.SucceededTaken, v.Failures)
	}
}

func TestCheckerNonMonotonicFences(t *testing.T) {
	h := clean()
	h.Jobs[1].Fence, h.Pods[1].Fence, h.Pods[1].JobFence = 9, 9, 9
	v := check("restart", h, true)
	if v.Monotonic || !v.Failed() {
		t.Fatalf("a lower fence after a higher one passed: %+v", v)
	}
}

func TestCheckerNotTerminalAndCrash(t *testing.T) {
	h := clean()
	h.Claimants[1].TerminalAt = time.Time{}
	h.Claimants[1].Phase = "Running"
	h.Crashes = []string{"operator a exited: exit status 2"}
	v := check("stuck", h, true)
	if v.AllTerminal || len(v.NotTerminal) != 1 {
		t.Fatalf("not-terminal LockedJob missed: %+v", v)
	}
	if len(v.Failures) != 2 {
		t.Fatalf("want a crash and a liveness failure, got %v", v.Failures)
	}
	if !strings.Contains(table([]verdict{v}), "FAIL") {
		t.Error("the table does not show the failure")
	}
}

func TestCheckerPodRunningPastItsLease(t *testing.T) {
	h := clean()
	// Redis dropped x's lease at 1800 while its pod ran until 2000; y's Job
	// and pod come later: no overlap, but x outlived its lease.
	h.Leases = []lease{{Holder: holder("a", "ns", "x"), Start: at(0), End: at(1800)}}
	h.Claimants[0].Phase = "LockLost"
	v := check("partition", h, false)
	if v.Overlaps != 0 {
		t.Fatalf("overlaps = %d, want 0", v.Overlaps)
	}
	if v.RanPast != 1 || v.LongestPast != 200*time.Millisecond || !v.Failed() {
		t.Fatalf("ran past = %d (%s), failures %v; want 1 (200ms) and a failure", v.RanPast, v.LongestPast, v.Failures)
	}
	if allowed := check("kill", h, true); allowed.Failed() {
		t.Fatalf("where overlaps are allowed, running past the lease is reported only: %v", allowed.Failures)
	}
}

// TestCheckerPodSeenStoppedJustAfterTheRelease: a release at the pod's success
// ends the lease a moment before the recorder sees that success; up to
// stopSeenLate that is the two watches, past it (or for a pod seen only
// deleted) it is a pod that ran on.
func TestCheckerPodSeenStoppedJustAfterTheRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		endMS   int
		stopped bool
		past    time.Duration
	}{
		{name: "seen Succeeded 1 ms after the release", endMS: 1801, stopped: true},
		{name: "seen Succeeded at the bound", endMS: 1850, stopped: true},
		{name: "seen Succeeded past the bound", endMS: 1851, stopped: true, past: 51 * time.Millisecond},
		{name: "seen deleted 1 ms after the release", endMS: 1801, past: time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			h.Leases = []lease{{Holder: holder("a", "ns", "x"), Start: at(0), End: at(1800)}}
			h.Pods[0].End, h.Pods[0].Stopped = at(tc.endMS), tc.stopped
			v := check("partition", h, false)
			want := 0
			if tc.past > 0 {
				want = 1
			}
			if v.RanPast != want || v.LongestPast != tc.past || v.Failed() != (want > 0) {
				t.Fatalf("ran past = %d (%s), failures %v; want %d (%s)", v.RanPast, v.LongestPast, v.Failures, want, tc.past)
			}
		})
	}
}

func TestCheckerNextAcquisitionEndsALease(t *testing.T) {
	h := clean()
	// No lease seen in Redis, but y's Job appeared at 1900, before x's pod
	// stopped at 2000: x's lease was over by then.
	h.Jobs[1].Added = at(1900)
	h.Pods[1].Start = at(2100)
	v := check("partition", h, false)
	if v.RanPast != 1 || v.LongestPast != 100*time.Millisecond {
		t.Fatalf("ran past = %d (%s), want 1 (100ms)", v.RanPast, v.LongestPast)
	}
}

func TestCheckerSucceededJudgedByThePodsNotTheJobCondition(t *testing.T) {
	h := clean()
	// x's pod ended at 2000, but its Job's Complete condition was seen only
	// at 9000 (the API server was down); y acquired at 2300, after the pod.
	h.Jobs[0].Finished = at(9000)
	if v := check("apiserver", h, false); v.Failed() {
		t.Fatalf("a late Job condition made a clean handoff fail: %v", v.Failures)
	}
}

// mixed is clean with y a guarded Job: its holder is job:y, as the operator names it in Redis, and
// its end is a guard state.
func mixed() history {
	h := clean()
	h.Pods[1].Claimant, h.Jobs[1].Claimant = "job:y", "job:y"
	h.Claimants[1] = claimantEntry{Cluster: "b", Namespace: "ns", Name: "job:y", Phase: guardReleased, TerminalAt: at(4100)}
	return h
}

func TestCheckerMixedHistoryPasses(t *testing.T) {
	if v := check("mixed", mixed(), false); v.Failed() {
		t.Fatalf("a LockedJob and a guarded Job one after the other judged %v", v.Failures)
	}
}

func TestCheckerGuardedJobOverlapsALockedJob(t *testing.T) {
	h := mixed()
	h.Pods[1].Start, h.Jobs[1].Added = at(1500), at(1300) // job:y unsuspended while x's pod ran
	h.Claimants[0].Phase = "LockLost"
	v := check("partition", h, false)
	if v.Overlaps != 1 || v.RanPast != 1 || !v.Failed() {
		t.Fatalf("overlap %d, ran past %d, failures %v; want 1, 1 and a failure", v.Overlaps, v.RanPast, v.Failures)
	}
}

func TestCheckerGuardedJobReleasedAlthoughTaken(t *testing.T) {
	h := mixed()
	// x (a LockedJob) holds second now: job:y ran first and says Released, though x acquired
	// during job:y's run.
	h.Pods[0], h.Pods[1] = pod("b", "job:y", "u2", 10, 100, 2000), pod("a", "x", "u1", 11, 2100, 4000)
	h.Jobs[0], h.Jobs[1] = job("b", "job:y", "u2", 10, 0, 2000), job("a", "x", "u1", 11, 1000, 4000)
	h.Claimants[0].Phase = "LockLost"
	v := check("pause", h, true)
	if len(v.SucceededTaken) != 1 || !strings.Contains(v.SucceededTaken[0], "b/ns/job:y") || !v.Failed() {
		t.Fatalf("Released-though-taken = %v, failures %v", v.SucceededTaken, v.Failures)
	}
	h.Claimants[1].Phase = "Lost"
	if v := check("pause", h, true); v.Failed() {
		t.Fatalf("a guarded Job that says Lost claims nothing: %v", v.Failures)
	}
}

func TestCheckerUnguardedJobFails(t *testing.T) {
	h := mixed()
	h.Claimants[1].Phase = guardUnguarded
	v := check("gate", h, true)
	if len(v.Unguarded) != 1 || !v.Failed() {
		t.Fatalf("unguarded = %v, failures %v; a guarded Job that ran unguarded must fail, in every class", v.Unguarded, v.Failures)
	}
}

func TestCheckerPodWithAnotherTokenThanItsJob(t *testing.T) {
	h := mixed()
	// job:y's Job recorded fence 11, but its pod template carried 1: its writes would be refused as
	// a stale holder's, though it held the lock.
	h.Pods[1].Fence = 1
	v := check("template", h, false)
	if len(v.WrongToken) != 1 || !strings.Contains(v.WrongToken[0], "b/y-pod") || !v.Failed() {
		t.Fatalf("wrong token = %v, failures %v", v.WrongToken, v.Failures)
	}
	h.Pods[1].Fence = 0 // no token at all: the env var the gate pointed at the annotation is empty
	if v := check("template", h, true); len(v.WrongToken) != 1 || !v.Failed() {
		t.Fatalf("a pod without its Job's token: wrong token = %v, failures %v; must fail in every class", v.WrongToken, v.Failures)
	}
}
