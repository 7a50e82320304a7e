//go:build fault

package fault

import (
	"time"
)

// history returns what cluster c's recorder saw in namespace: the Jobs, and the Running interval
// of every pod that ran, ending at the first of Succeeded/Failed/deleted or, for a pod still
// running, at now.
func (c *cluster) history(namespace string, now time.Time) ([]jobEntry, []podSpan) {
	h := c.rec.History().InNamespace(namespace)
	var jobs []jobEntry
	for _, j := range h.Jobs {
		jobs = append(jobs, jobEntry{Cluster: c.name, Namespace: j.Namespace, Name: j.Name, UID: j.UID,
			Claimant: j.LockedJob, Fence: j.Fence, Slot: j.Slot, Added: j.Added, Finished: j.Ended()})
	}
	var pods []podSpan
	for _, p := range h.Pods {
		if p.Running.IsZero() {
			continue
		}
		end := now
		for _, t := range []time.Time{p.Stopped(), p.Deleted} {
			if !t.IsZero() && t.Before(end) {
				end = t
			}
		}
		span := podSpan{Cluster: c.name, Namespace: p.Namespace, Name: p.Name, JobUID: p.JobUID, Fence: p.Fence,
			Slot: p.Slot, Start: p.Running, End: end, Terminating: p.Terminating}
		if j, ok := h.JobByUID(p.JobUID); ok {
			span.Job, span.Claimant = j.Name, j.LockedJob
			if span.Fence == 0 {
				span.Fence = j.Fence
			}
			if !p.HasSlot {
				span.Slot = j.Slot
			}
		}
		pods = append(pods, span)
	}
	return jobs, pods
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

// runningPods counts the pods of the named LockedJob's Jobs that are Running now.
func (c *cluster) runningPods(namespace, lockedJob string) int {
	h := c.rec.History().InNamespace(namespace)
	n := 0
	for _, p := range h.Pods {
		if j, ok := h.JobByUID(p.JobUID); ok && j.LockedJob == lockedJob && p.RunsNow() {
			n++
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
