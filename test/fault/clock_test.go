//go:build fault

package fault

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockedjob/lockedjob/test/testkit"
)

// clockStepSize is how far the Redis host's wall clock steps: past the ttl, so the holder's key
// expires at once.
const clockStepSize = 2 * ttl

// clockStep steps the wall clock of the Redis host (redisserver.ShiftClock, what an NTP step does)
// forward past the ttl while the cast's holder holds, then back while the next holder holds.
//
// Forward: Redis expires the holder's key at once, while its operator still counts the lease
// valid on its own monotonic clock; b1, retrying, acquires under a higher fence, and the holder's
// operator learns at its next renewal (ttl/3 later) that the key is gone and stops the pod. The
// design's assumption that Redis's clock does not step is dropped here, so the two may overlap
// for up to a renewal interval; the fence must order them.
//
// Back: b1's lease lasts longer in Redis (a liveness cost only), and a2, which acquires after b1
// once the clock is behind b1's fence, must still get a higher fence: the fence is
// max(previous + 1, clock), never the clock alone.
func clockStep(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		defer env.redis.ShiftClock(r.t, 0) // whatever happens, the next scenario's clock is the host's
		a, b := env.clusters["a"], env.clusters["b"]
		if err := k.setUp(r, 8*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		r.faultAt = time.Now()
		env.redis.ShiftClock(r.t, clockStepSize)
		if err := r.waitRunning(b, "b1"); err != nil {
			return time.Time{}, fmt.Errorf("after the forward step: %w", err)
		}
		logf("%s: b1 runs %s after the clock stepped %s forward", r.sc.name, since(r.faultAt), clockStepSize)
		env.redis.ShiftClock(r.t, 0)
		if err := r.create(a, "a2", testkit.LockedJobOptions{Run: time.Second}); err != nil {
			return time.Time{}, err
		}
		return time.Now(), nil
	}
}

// steppedClockOrdered judges clockStep's own promises: the forward step bit (b1 came under the
// lock while the first holder's pod still ran, or at least before its lease would have ended
// untouched), and a2, which acquired after the backward step, has a higher fence than b1. The
// checker's rules (fences rise per slot in acquisition order, no stale write accepted) cover the
// rest.
func steppedClockOrdered(r *run, h history) []string {
	var fails []string
	jobs := slices.Clone(h.Jobs)
	slices.SortFunc(jobs, func(x, y jobEntry) int { return x.Added.Compare(y.Added) })
	find := func(holderName string) *jobEntry {
		for i := range jobs {
			if jobs[i].holder() == holderName {
				return &jobs[i]
			}
		}
		return nil
	}
	if len(jobs) == 0 {
		return []string{"no Job came under the lock"}
	}
	first := jobs[0]
	b1, a2 := find(holder("b", r.ns, "b1")), find(holder("a", r.ns, "a2"))
	if b1 == nil || a2 == nil {
		return []string{fmt.Sprintf("b1's or a2's Job never came under the lock (b1 %v, a2 %v)", b1 != nil, a2 != nil)}
	}
	if !b1.Added.After(r.faultAt) {
		fails = append(fails, fmt.Sprintf("b1 came under the lock at %s, before the clock stepped (%s)",
			rel(b1.Added, r.start), rel(r.faultAt, r.start)))
	}
	// Untouched, the first holder's lease would have lasted until its pod ended (8 s) and its
	// release; b1 must have come long before: the step, not the end of the run, let it in.
	if firstEnd := first.Added.Add(8 * time.Second); !b1.Added.Before(firstEnd) {
		fails = append(fails, fmt.Sprintf("b1 came under the lock at %s, not before %s's run would have ended (%s): the step did not bite",
			rel(b1.Added, r.start), first.holder(), rel(firstEnd, r.start)))
	}
	if a2.Fence <= b1.Fence {
		fails = append(fails, fmt.Sprintf("a2's fence %d is not above b1's %d after the clock stepped back", a2.Fence, b1.Fence))
	}
	var overlap time.Duration
	for _, p := range h.Pods {
		if p.holder() != first.holder() {
			continue
		}
		for _, q := range h.Pods {
			if q.holder() == b1.holder() && p.End.After(q.Start) {
				overlap = max(overlap, p.End.Sub(q.Start))
			}
		}
	}
	logf("%s: fences %s %d, b1 %d (+%s, the forward step's clock term), a2 %d (b1's +%d after the backward step); "+
		"%s's pod ran %s beside b1's", r.sc.name, first.holder(), first.Fence, b1.Fence,
		time.Duration(b1.Fence-first.Fence)*time.Microsecond, a2.Fence, a2.Fence-b1.Fence, first.holder(), overlap.Round(time.Millisecond))
	return fails
}
