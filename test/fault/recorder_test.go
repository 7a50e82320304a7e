//go:build fault

package fault

import (
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// claimantOf names whom a recorded Job works for, as holder does: its LockedJob, or the guarded Job
// itself (job:<name>); ok is false for any other Job.
func claimantOf(j testkit.JobRecord) (string, bool) {
	switch {
	case j.LockedJob != "":
		return j.LockedJob, true
	case j.Guarded:
		return guardedClaimant(j.Name), true
	}
	return "", false
}

// guardedClaimant is the claimant's name of the guarded Job named name.
func guardedClaimant(name string) string {
	return locks.Claimant{Kind: locks.KindJob, Name: name}.ObjectName()
}

// history returns what cluster c's recorder saw in namespace: the Jobs that ran under a holder's
// lock, and the Running interval of every pod that ran, ending at the first of
// Succeeded/Failed/deleted or, for a pod still running, at now.
//
// A LockedJob's Job exists only once its LockedJob acquired; a guarded Job exists from its
// creation, suspended, and comes under the lock when the operator unsuspends it with the fence:
// that is its entry's Added. A guarded Job that never got a fence never held (its pods, should it
// have any, are still judged, under fence 0).
func (c *cluster) history(namespace string, now time.Time) ([]jobEntry, []podSpan) {
	h := c.rec.History().InNamespace(namespace)
	var jobs []jobEntry
	for _, j := range h.Jobs {
		claimant, _ := claimantOf(j)
		added := j.Added
		if j.Guarded {
			if j.Fence == 0 {
				continue
			}
			added = j.Unsuspended
		}
		jobs = append(jobs, jobEntry{Cluster: c.name, Namespace: j.Namespace, Name: j.Name, UID: j.UID,
			Claimant: claimant, Fence: j.Fence, Slot: j.Slot, Added: added, Finished: j.Ended()})
	}
	var pods []podSpan
	for _, p := range h.Pods {
		if p.Running.IsZero() {
			continue
		}
		end, stopped := now, false
		for _, t := range []time.Time{p.Stopped(), p.Deleted} {
			if !t.IsZero() && t.Before(end) {
				end, stopped = t, t.Equal(p.Stopped())
			}
		}
		span := podSpan{Cluster: c.name, Namespace: p.Namespace, Name: p.Name, JobUID: p.JobUID, Fence: p.Fence,
			Slot: p.Slot, Start: p.Running, End: end, Terminating: p.Terminating, Stopped: stopped}
		if j, ok := h.JobByUID(p.JobUID); ok {
			span.Job, span.JobFence = j.Name, j.Fence
			span.Claimant, _ = claimantOf(j)
			if !p.HasSlot {
				span.Slot = j.Slot
			}
		}
		pods = append(pods, span)
	}
	return jobs, pods
}

// guardedJobs returns the end state of every guarded Job cluster c's recorder saw in namespace:
// its guard state as last seen (Waiting before the operator wrote one, Deleted once it is gone),
// and when it was first seen terminal: Released, Lost or Unguarded, or gone.
func (c *cluster) guardedJobs(namespace string) []claimantEntry {
	var out []claimantEntry
	for _, j := range c.rec.History().InNamespace(namespace).Jobs {
		if !j.Guarded {
			continue
		}
		e := claimantEntry{Cluster: c.name, Namespace: j.Namespace, Name: guardedClaimant(j.Name), Phase: string(j.Guard())}
		if e.Phase == "" {
			e.Phase = "Waiting"
		}
		if !j.Deleted.IsZero() {
			e.Phase = "Deleted"
		}
		for _, g := range []batchv1alpha1.GuardState{batchv1alpha1.GuardReleased, batchv1alpha1.GuardLost, batchv1alpha1.GuardUnguarded} {
			if at, ok := j.GuardSeen[g]; ok && (e.TerminalAt.IsZero() || at.Before(e.TerminalAt)) {
				e.TerminalAt = at
			}
		}
		if !j.Deleted.IsZero() && (e.TerminalAt.IsZero() || j.Deleted.Before(e.TerminalAt)) {
			e.TerminalAt = j.Deleted
		}
		out = append(out, e)
	}
	return out
}

// podsSettled reports whether every pod seen in namespace has stopped or is gone, so the history
// holds whole intervals.
func (c *cluster) podsSettled(namespace string) bool {
	for _, p := range c.rec.History().InNamespace(namespace).Pods {
		if !p.Settled() {
			return false
		}
	}
	return true
}

// runningPods counts the pods that work for claimant (a LockedJob's name, or guardedClaimant of a
// guarded Job) and are Running now.
func (c *cluster) runningPods(namespace, claimant string) int {
	h := c.rec.History().InNamespace(namespace)
	n := 0
	for _, p := range h.Pods {
		if j, ok := h.JobByUID(p.JobUID); ok && p.RunsNow() {
			if who, ok := claimantOf(j); ok && who == claimant {
				n++
			}
		}
	}
	return n
}

// terminatingPods counts the pods in namespace that are being deleted but not gone.
func (c *cluster) terminatingPods(namespace string) int {
	n := 0
	for _, p := range c.rec.History().InNamespace(namespace).Pods {
		if !p.Terminating.IsZero() && p.Deleted.IsZero() {
			n++
		}
	}
	return n
}
