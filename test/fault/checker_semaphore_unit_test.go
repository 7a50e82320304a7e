package fault

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Hand-made histories of a semaphore (a lock of two permits): as for the mutex, each case has one
// known flaw (or none), and the checker must name exactly it.

func inSlot[T podSpan | jobEntry](slot int, x T) T {
	switch v := any(&x).(type) {
	case *podSpan:
		v.Slot = slot
	case *jobEntry:
		v.Slot = slot
	}
	return x
}

// twoSlots is a valid history of two permits: x (slot 0) and y (slot 1) run at once, then z takes
// slot 0 and w slot 1. Each slot's fences rise; across slots they fall (z's 11, then w's 6), which a
// semaphore allows.
func twoSlots() history {
	return history{
		Permits: 2,
		Pods: []podSpan{
			inSlot(0, pod("a", "x", "u1", 10, 100, 2000)),
			inSlot(1, pod("b", "y", "u2", 5, 150, 2500)),
			inSlot(0, pod("b", "z", "u3", 11, 2200, 4000)),
			inSlot(1, pod("a", "w", "u4", 6, 2700, 4500)),
		},
		Jobs: []jobEntry{
			inSlot(0, job("a", "x", "u1", 10, 0, 2000)),
			inSlot(1, job("b", "y", "u2", 5, 50, 2500)),
			inSlot(0, job("b", "z", "u3", 11, 2100, 4000)),
			inSlot(1, job("a", "w", "u4", 6, 2600, 4500)),
		},
		Claimants: []claimantEntry{
			lockedJob("a", "x", "Succeeded", 2100), lockedJob("b", "y", "Succeeded", 2600),
			lockedJob("b", "z", "Succeeded", 4100), lockedJob("a", "w", "Succeeded", 4600),
		},
		HealedAt:      t0,
		TerminalBound: 10 * time.Second,
	}
}

func TestCheckerSemaphoreValidHistoryPasses(t *testing.T) {
	v := check("semaphore", twoSlots(), false)
	if v.Failed() || v.Overlaps != 0 || v.Crowded != 0 || v.RanPast != 0 || v.StaleAccepted != 0 || v.StaleRejected != 0 || !v.Monotonic {
		t.Fatalf("a valid history of two permits judged %+v", v)
	}
	if v.Permits != 2 || v.MostHolders != 2 {
		t.Errorf("permits %d, most holders at once %d; want 2 and 2", v.Permits, v.MostHolders)
	}
	// The same history on a mutex breaks it: N is what makes it valid.
	h := twoSlots()
	h.Permits = 1
	if mutex := check("mutex", h, false); !mutex.Failed() || mutex.Overlaps == 0 || mutex.Monotonic {
		t.Fatalf("two holders at once with falling fences passed as a mutex: %+v", mutex)
	}
}

func TestCheckerSemaphoreMoreHoldersThanPermits(t *testing.T) {
	h := twoSlots()
	// A third holder in a slot of its own runs 500..1500 beside x and y.
	h.Pods = append(h.Pods, inSlot(2, pod("a", "v", "u5", 1, 500, 1500)))
	h.Jobs = append(h.Jobs, inSlot(2, job("a", "v", "u5", 1, 400, 1500)))
	h.Claimants = append(h.Claimants, lockedJob("a", "v", "Succeeded", 1600))
	v := check("semaphore", h, false)
	if v.MostHolders != 3 || v.Crowded != 1 || v.LongestCrowded != time.Second {
		t.Fatalf("most %d, crowded %d longest %s; want 3, 1 and 1s", v.MostHolders, v.Crowded, v.LongestCrowded)
	}
	if v.Overlaps != 0 {
		t.Errorf("overlaps in one slot = %d, want 0 (each holder has its own slot)", v.Overlaps)
	}
	if !v.Failed() || !strings.Contains(strings.Join(v.Failures, ";"), "more than 2 holders running (most 3, longest 1s)") {
		t.Fatalf("three holders of two permits with the operator alive must fail: %v", v.Failures)
	}
	if !strings.Contains(table([]verdict{v}), "| 3 / 2 (1 interval(s) over, longest 1s) |") {
		t.Errorf("the table does not show the crowding:\n%s", table([]verdict{v}))
	}
	allowed := check("kill", h, true)
	if allowed.Failed() {
		t.Fatalf("where a process was killed, too many holders are reported, not failed: %v", allowed.Failures)
	}
	if !strings.Contains(table([]verdict{allowed}), "| 3 / 2 (1 interval(s) over, longest 1s, allowed) |") {
		t.Errorf("the table does not mark the crowding allowed:\n%s", table([]verdict{allowed}))
	}
}

func TestCheckerSemaphoreTwoHoldersOfOneSlot(t *testing.T) {
	h := twoSlots()
	// y ends early, and z takes slot 0 at 1500 while x still runs until 2000: two holders at
	// once, as two permits allow, but both in slot 0.
	h.Pods[1].End, h.Jobs[1].Finished = at(1000), at(1000)
	h.Jobs[2].Added = at(1500)
	h.Pods[2].Start = at(1600)
	h.Claimants[0] = lockedJob("a", "x", "LockLost", 2100)
	v := check("semaphore", h, false)
	if v.Crowded != 0 || v.MostHolders != 2 {
		t.Fatalf("crowded %d, most %d; want 0 and 2", v.Crowded, v.MostHolders)
	}
	if v.Overlaps != 1 || v.LongestOverlap != 400*time.Millisecond {
		t.Fatalf("overlaps in one slot = %d longest %s, want 1 and 400ms", v.Overlaps, v.LongestOverlap)
	}
	if v.RanPast != 1 || v.LongestPast != 500*time.Millisecond {
		t.Errorf("ran past = %d (%s), want 1 (500ms): z's Job ended x's lease of slot 0", v.RanPast, v.LongestPast)
	}
	// x's writes from 1600 on come after z's fence 11 in their partition: rejected.
	if v.StaleAccepted != 0 || v.StaleRejected == 0 {
		t.Errorf("stale accepted %d rejected %d, want 0 and > 0", v.StaleAccepted, v.StaleRejected)
	}
	if !v.Failed() || !strings.Contains(strings.Join(v.Failures, ";"), "overlap(s) of different holders in one slot") {
		t.Fatalf("two holders of one slot with the operator alive must fail: %v", v.Failures)
	}
}

func TestCheckerSemaphoreFenceFallsWithinASlot(t *testing.T) {
	h := twoSlots()
	h.Jobs[3].Fence, h.Pods[3].Fence = 4, 4 // w follows y (5) in slot 1 with a lower fence
	v := check("semaphore", h, true)
	if v.Monotonic || !strings.Contains(v.MonotonicNote, "a/w-job fence 4") || !strings.Contains(v.MonotonicNote, "in slot 1") {
		t.Fatalf("a fence falling within slot 1 passed: monotonic %v, note %q", v.Monotonic, v.MonotonicNote)
	}
	if !v.Failed() {
		t.Error("a fence falling within a slot must fail even where overlaps are allowed")
	}
}

func TestCheckerSemaphoreFenceFallsAcrossSlots(t *testing.T) {
	// z (slot 0, fence 11) appears before w (slot 1, fence 6), and w writes after z: each slot's
	// partition of the store fences its own writers, so w is not stale.
	v := check("semaphore", twoSlots(), false)
	if !v.Monotonic || v.StaleRejected != 0 || v.Failed() {
		t.Fatalf("a fence falling across slots was judged: monotonic %v (%s), rejected %d, failures %v",
			v.Monotonic, v.MonotonicNote, v.StaleRejected, v.Failures)
	}
	// The same writes against one partition: w's fence 6 after z's 11 is refused.
	if accepted, rejected := fencedStore(inOnePartition(twoSlots().Pods)); accepted != 0 || rejected == 0 {
		t.Errorf("one partition: accepted %d rejected %d, want 0 and > 0", accepted, rejected)
	}
}

func TestCheckerSemaphoreStaleWriteWithinASlot(t *testing.T) {
	h := twoSlots()
	// z got x's token in slot 0 (a failover that lost the slot's INCR).
	h.Jobs[2].Fence, h.Pods[2].Fence = 10, 10
	v := check("failover", h, true)
	if v.StaleAccepted == 0 || v.Monotonic || !v.Failed() {
		t.Fatalf("a repeated token within slot 0: accepted %d, monotonic %v, failures %v", v.StaleAccepted, v.Monotonic, v.Failures)
	}
}

func TestCheckerMutexIgnoresSlots(t *testing.T) {
	// A lock of one permit is one slot, whatever the annotations say, and a history without
	// permits is a mutex's: both keep the verdicts of the unslotted history.
	want := check("clean", clean(), false)
	for _, permits := range []int{0, 1} {
		h := clean()
		h.Permits = permits
		h.Pods[1].Slot, h.Jobs[1].Slot = 3, 3
		if got := check("clean", h, false); !reflect.DeepEqual(got, want) {
			t.Errorf("permits %d: %+v, want %+v", permits, got, want)
		}
		h.Pods[1].Start, h.Jobs[1].Added = at(1500), at(1300) // overlap in "another slot"
		if got := check("clean", h, false); got.Overlaps != 1 || !got.Failed() {
			t.Errorf("permits %d: an overlap of a mutex's holders in different slots passed: %+v", permits, got)
		}
	}
	if want.MostHolders != 1 || want.Permits != 1 || want.Crowded != 0 {
		t.Errorf("clean mutex history: most %d of %d, crowded %d; want 1 of 1 and 0", want.MostHolders, want.Permits, want.Crowded)
	}
}

func inOnePartition(pods []podSpan) []podSpan {
	for i := range pods {
		pods[i].Slot = 0
	}
	return pods
}

func TestCheckerSemaphoreCountsHoldersNotPods(t *testing.T) {
	h := twoSlots()
	// x runs a second pod beside its first (one holder, two pods), and v starts in slot 2 at the
	// very instant y stops: neither puts three holders at once.
	h.Pods = append(h.Pods, inSlot(0, pod("a", "x", "u1", 10, 300, 1900)), inSlot(2, pod("a", "v", "u5", 1, 2500, 2600)))
	h.Jobs = append(h.Jobs, inSlot(2, job("a", "v", "u5", 1, 2400, 2600)))
	h.Claimants = append(h.Claimants, lockedJob("a", "v", "Succeeded", 2700))
	v := check("semaphore", h, false)
	if v.MostHolders != 2 || v.Crowded != 0 {
		t.Fatalf("most %d, crowded %d (longest %s); want 2 and 0", v.MostHolders, v.Crowded, v.LongestCrowded)
	}
	// One pod more of v, 100 ms before y stops, makes three.
	h.Pods[len(h.Pods)-1].Start = at(2400)
	if v := check("semaphore", h, false); v.MostHolders != 3 || v.Crowded != 1 || v.LongestCrowded != 100*time.Millisecond {
		t.Fatalf("most %d, crowded %d (longest %s); want 3, 1 and 100ms", v.MostHolders, v.Crowded, v.LongestCrowded)
	}
}
