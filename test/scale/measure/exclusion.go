package measure

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Run is one Job of a lock as a watch saw it: when it appeared and when it first showed a
// terminal condition (zero if never).
type Run struct {
	Lock  string
	Job   string
	Fence int64
	// Created is when the Job was first seen able to run: a LockedJob's Job is created so, a
	// guarded Job is created suspended and unsuspended with its fence once its lock is held.
	Created   time.Time
	Completed time.Time
	// PodSucceeded is when the Job's pod was first seen Succeeded (zero if never), about a second
	// before the Job controller writes Complete: a LockedJob's lock goes then (docs/design.md,
	// "Release at the outcome").
	PodSucceeded time.Time
	// Queued is when the Job's LockedJob was first seen Waiting, or a guarded Job first seen
	// (suspended, waiting for its lock) (zero if never): a successor that waited before its
	// predecessor finished is a handoff, not a claimant that came late.
	Queued time.Time
	// Submitted is when the object the Job runs for was first seen: the LockedJob, or the Job
	// itself (plain, guarded, or in Kueue's queue).
	Submitted time.Time

	// The resource versions of the writes Created, Completed and PodSucceeded saw (0 if unknown).
	// Two watches deliver their events in no common order, so a pod's Succeeded may arrive a
	// moment after the successor's Job that was written after it; the API server's resource
	// versions are one sequence over all objects (comparable since Kubernetes 1.35, KEP-5504),
	// and where both are known they order the writes themselves.
	CreatedRV, CompletedRV, PodSucceededRV uint64
}

// Ended is when the Job's work was first seen over: its pod Succeeded, else its terminal condition
// (zero if neither). Exclusion and handoffs are judged from it, alike for every system.
func (r Run) Ended() time.Time {
	t, _ := r.ended()
	return t
}

// ended is Ended with the resource version of the write it saw.
func (r Run) ended() (time.Time, uint64) {
	if !r.PodSucceeded.IsZero() && (r.Completed.IsZero() || r.PodSucceeded.Before(r.Completed)) {
		return r.PodSucceeded, r.PodSucceededRV
	}
	return r.Completed, r.CompletedRV
}

// startedAfter reports whether cur became able to run after prev was over: by the order of the
// two writes where their resource versions are known, else by when the watches saw them.
func startedAfter(prev, cur Run) bool {
	ended, rv := prev.ended()
	if rv != 0 && cur.CreatedRV != 0 {
		return cur.CreatedRV > rv
	}
	return !cur.Created.Before(ended)
}

// gap is the time from prev seen over to cur seen able to run, never below zero: writes in order
// may reach the watches a moment out of it.
func gap(prev, cur Run) time.Duration {
	return max(cur.Created.Sub(prev.Ended()), 0)
}

// byLock groups runs per lock, each group in the order the watch saw the Jobs appear.
func byLock(runs []Run) map[string][]Run {
	out := map[string][]Run{}
	for _, r := range runs {
		out[r.Lock] = append(out[r.Lock], r)
	}
	for _, rs := range out {
		slices.SortStableFunc(rs, func(a, b Run) int { return a.Created.Compare(b.Created) })
	}
	return out
}

// CheckExclusion returns every breach of mutual exclusion: per lock, in the order the Jobs
// appeared, each fence must be higher than the one before, and a Job may appear only after its
// predecessor was seen finished (Ended). A predecessor never seen finished overlaps everything after it.
func CheckExclusion(runs []Run) []string {
	var out []string
	groups := byLock(runs)
	for _, lock := range sortedKeys(groups) {
		rs := groups[lock]
		for i := 1; i < len(rs); i++ {
			prev, cur := rs[i-1], rs[i]
			if cur.Fence <= prev.Fence {
				out = append(out, fmt.Sprintf("lock %s: Job %s (fence %d) ran after %s (fence %d)", lock, cur.Job, cur.Fence, prev.Job, prev.Fence))
			}
			switch ended := prev.Ended(); {
			case ended.IsZero():
				out = append(out, fmt.Sprintf("lock %s: Job %s appeared while %s had not finished", lock, cur.Job, prev.Job))
			case !startedAfter(prev, cur):
				out = append(out, fmt.Sprintf("lock %s: Job %s appeared %s before %s finished", lock, cur.Job, ended.Sub(cur.Created), prev.Job))
			}
		}
	}
	return out
}

// HandoffGaps returns, for every Job that followed another of its lock, the time from the
// predecessor seen finished (Ended) to the Job seen created. Breaches (negative or open gaps) are left to
// CheckExclusion.
func HandoffGaps(runs []Run) []time.Duration {
	var out []time.Duration
	for _, rs := range byLock(runs) {
		for i := 1; i < len(rs); i++ {
			prev, cur := rs[i-1], rs[i]
			if prev.Ended().IsZero() || !startedAfter(prev, cur) || cur.Fence <= prev.Fence {
				continue
			}
			out = append(out, gap(prev, cur))
		}
	}
	return out
}

// QueuedHandoffGaps returns the handoff gaps (see HandoffGaps) whose successor was already seen
// Waiting when its predecessor finished: the time a handoff takes, without the time a successor
// that was not yet queued took to arrive (a burst the operator is still working through).
func QueuedHandoffGaps(runs []Run) []time.Duration {
	var out []time.Duration
	for _, rs := range byLock(runs) {
		for i := 1; i < len(rs); i++ {
			prev, cur := rs[i-1], rs[i]
			ended := prev.Ended()
			if ended.IsZero() || !startedAfter(prev, cur) || cur.Fence <= prev.Fence ||
				cur.Queued.IsZero() || cur.Queued.After(ended) {
				continue
			}
			out = append(out, gap(prev, cur))
		}
	}
	return out
}

// StartDelays returns, per Job, the time from its object first seen to the Job seen able to run:
// created for a LockedJob or a plain Job, unsuspended for a guarded Job or one in Kueue's queue. A
// plain Job's is zero: nothing stands between its creation and its pods.
func StartDelays(runs []Run) []time.Duration {
	out := make([]time.Duration, 0, len(runs))
	for _, r := range runs {
		if !r.Submitted.IsZero() {
			out = append(out, r.Created.Sub(r.Submitted))
		}
	}
	return out
}

// FirstJobDelays returns, per lock, how long after start its first Job appeared.
func FirstJobDelays(runs []Run, start time.Time) []time.Duration {
	groups := byLock(runs)
	out := make([]time.Duration, 0, len(groups))
	for _, rs := range groups {
		out = append(out, rs[0].Created.Sub(start))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}
