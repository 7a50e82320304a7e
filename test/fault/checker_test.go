// Package fault is lockedjob's fault suite: two local clusters share one
// redis-server, one operator per cluster talks to it through its own TCP fault
// proxy, and each scenario injects one fault while LockedJobs and guarded Jobs
// of both clusters contend for one lock. A recorder keeps the history the
// clusters themselves report (pods' Running intervals, Jobs and their fences,
// LockedJobs' final phases, guarded Jobs' guard states, and their Events) and
// the checker in this file judges it.
//
// The checker has no build tag and is tested on hand-made histories by the
// ordinary unit tests, so a checker that cannot fail is caught without a
// cluster. The suite that produces real histories needs -tags=fault (make
// test-fault). See docs/fault.md.
package fault

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// writeEvery is how often a simulated pod writes to the fenced store while it
// runs, after a first write at the start of its Running interval.
const writeEvery = 100 * time.Millisecond

// podSpan is one pod's Running interval as the recorder saw it, on the test
// process's clock. A pod that never finished while recorded has End at the
// end of the recording (it is assumed to run until then).
type podSpan struct {
	Cluster   string
	Namespace string
	Name      string
	Job       string // Job name
	JobUID    string // the writer identity in the fenced store: one acquisition, one Job
	Claimant  string // whom the pod works for (see holder)
	// Fence is the token the pod carries (its annotation, which a guarded Job's env reads; 0
	// without), the one its writes use; JobFence the one its Job recorded when it came under the
	// lock (0 for a Job that never did). They must be one.
	Fence    int64
	JobFence int64
	// Slot is the semaphore slot of the pod's Job (annotation batch.lockedjob.dev/slot; 0 for a
	// lock of one permit): its fence is ordered against the same slot's writers only.
	Slot  int
	Start time.Time
	End   time.Time
	// Terminating is when the pod was first seen being deleted (zero if
	// never): reported, not judged, since its containers may still run.
	Terminating time.Time
	// Stopped: End is when the pod was seen Succeeded or Failed (not deleted,
	// nor the end of the recording). See stopSeenLate.
	Stopped bool
}

// stopSeenLate bounds how much later the recorder may see a pod's terminal
// phase than another watcher of the same API server (the operator, which
// releases at a pod's success). A terminal phase is final: nothing of the pod
// runs after the status write that reported it, so a release the operator made
// on seeing that write came after the pod's end even when the recorder's stamp
// is a few milliseconds later (1 ms in one CI run of blackhole-a). Deletions
// and pods never seen stopped get no such allowance.
const stopSeenLate = 50 * time.Millisecond

// holder names the claimant a pod or Job works for, across both clusters, as the operator's
// holder names do without their UID (locks.Identity.Holder): claimant is a LockedJob's name, or
// job:<name> for a guarded Job (locks.Claimant.ObjectName), so the lease watcher's holders match.
func holder(cluster, namespace, claimant string) string {
	return cluster + "/" + namespace + "/" + claimant
}

func (p podSpan) holder() string { return holder(p.Cluster, p.Namespace, p.Claimant) }

// holderOf turns the operator's holder name cluster/namespace/name/uid into
// the checker's cluster/namespace/name.
func holderOf(meta string) string {
	i := strings.LastIndexByte(meta, '/')
	if i < 0 {
		return meta
	}
	return meta[:i]
}

// jobEntry is one Job as the recorder saw it.
type jobEntry struct {
	Cluster   string
	Namespace string
	Name      string
	UID       string
	Claimant  string // whom the Job works for (see holder)
	Fence     int64
	Slot      int // the semaphore slot (0 for a lock of one permit)
	// Added is when the Job was first seen under its holder's lock: a LockedJob's Job created, a
	// guarded Job unsuspended with its fence. It is the acquisition order across clusters.
	Added    time.Time
	Finished time.Time // first seen Complete or Failed, or suspended after it ran (zero if never)
}

func (j jobEntry) holder() string { return holder(j.Cluster, j.Namespace, j.Claimant) }

// claimantEntry is a claimant's end state: a LockedJob's phase, or a guarded Job's guard state
// (Held, Released, Lost, Unguarded; Waiting before the operator wrote one), or Deleted once
// either is gone. Name is the claimant's name in holder.
type claimantEntry struct {
	Cluster    string
	Namespace  string
	Name       string
	Phase      string
	Message    string
	TerminalAt time.Time // first seen in a terminal phase (zero if never)
	Conditions []string  // Type=Status/Reason, as last seen
	Events     []string  // reasons, oldest first
}

func (l claimantEntry) holder() string { return holder(l.Cluster, l.Namespace, l.Name) }

// Phases of claimantEntry that the checker reads: a LockedJob's, and a guarded Job's guard states.
const (
	phaseSucceeded = string(batchv1alpha1.PhaseSucceeded)
	guardReleased  = string(batchv1alpha1.GuardReleased)
	guardUnguarded = string(batchv1alpha1.GuardUnguarded)
)

// claimsUnbroken reports an end that says the claimant held its lock for the whole run: a
// LockedJob that Succeeded, a guarded Job Released (the operator writes Lost instead when the
// release found the lock not its own).
func (l claimantEntry) claimsUnbroken() bool {
	return l.Phase == phaseSucceeded || l.Phase == guardReleased
}

// lease is one holder's uninterrupted hold of the lock as seen in Redis. End
// is when Redis dropped it: the expiry the last observation promised, or the
// first observation without it, whichever came first; it is zero while the
// lease still runs when the recording ends.
type lease struct {
	Holder     string
	Slot       int // the semaphore slot whose key held it (0 for a lock of one permit)
	Start, End time.Time
	// LongestGap is the longest time between two renewals seen (a renewal pushes the expiry
	// later), from the lease's start; LeastLeft is the least time to expiry any observation saw.
	// Reported, not judged.
	LongestGap, LeastLeft time.Duration
}

// history is what one scenario recorded.
type history struct {
	// Permits is how many holders the lock admits at once (0 means 1). With more than one, the
	// exclusion rules apply per slot, and a separate rule bounds the holders running at once.
	Permits   int
	Pods      []podSpan
	Jobs      []jobEntry
	Claimants []claimantEntry
	Leases    []lease
	// Crashes are operator processes that exited without being asked to, or
	// logged a panic, while the scenario ran.
	Crashes []string
	// HealedAt is when the fault was removed (the scenario start for baseline).
	HealedAt time.Time
	// SplitBrain: the holder's Redis kept accepting its renewals while another holder acquired on
	// a promoted replica, so the holder cannot know it was taken: a claim of success despite that
	// is the stated limit of an unmitigated Sentinel split brain, reported, not judged.
	SplitBrain bool
	// TerminalBound is how long after HealedAt every claimant must be terminal.
	TerminalBound time.Duration
}

// verdict is the checker's finding for one scenario: one row of the table.
type verdict struct {
	Scenario string
	Permits  int // how many holders the lock admits at once (1: a mutex)
	// MostHolders is the most different holders seen with a Running pod at one instant; Crowded
	// counts the intervals in which more than Permits of them ran, LongestCrowded the longest.
	MostHolders    int
	Crowded        int
	LongestCrowded time.Duration
	// Overlaps counts pairs of pods of different holders of one slot Running at once (a mutex is
	// one slot, so: of different holders); LongestOverlap is the longest such pair.
	Overlaps       int
	LongestOverlap time.Duration
	// RanPast counts pods that still ran after their holder's lease had ended
	// (see leaseEnd); LongestPast is the longest run past it.
	RanPast     int
	LongestPast time.Duration
	// StaleAccepted counts writes the fenced store accepted from a holder that was not its
	// slot's newest; StaleRejected the writes it refused (a fenced resource protected itself).
	StaleAccepted  int
	StaleRejected  int
	Monotonic      bool // within each slot, fences strictly increase in the order the Jobs appeared
	MonotonicNote  string
	AllTerminal    bool
	TerminalWithin time.Duration // latest terminal time after HealedAt (0 if all were terminal before)
	NotTerminal    []string
	DuplicateJobs  int      // claimants that had more than one Job
	SucceededTaken []string // claimants Succeeded (Released) although another holder acquired during their run
	Unguarded      []string // guarded Jobs the operator found running without the gate's suspension
	WrongToken     []string // pods that carried another token than their Job's acquisition
	Crashes        []string
	// OverlapAllowed: the fault paused or killed a process, or Redis lost
	// data: overlaps are reported, the fences must protect.
	OverlapAllowed bool
	Failures       []string
	Notes          []string
	// Trace is whether what Redis ran, and the pods wrote, followed the queue model (trace_test.go).
	Trace string
}

// Failed reports whether the scenario broke a rule the suite enforces.
func (v verdict) Failed() bool { return len(v.Failures) > 0 }

// check judges one history. A lock of N permits is N locks that share one line of waiters: each
// exclusion rule holds per slot, and no more than N holders may run at once.
func check(name string, h history, overlapAllowed bool) verdict {
	h = h.bySlot()
	v := verdict{Scenario: name, Permits: h.permits(), OverlapAllowed: overlapAllowed, Crashes: h.Crashes}
	v.MostHolders, v.Crowded, v.LongestCrowded = crowding(h.Pods, v.Permits)
	v.Overlaps, v.LongestOverlap = overlaps(h.Pods)
	v.RanPast, v.LongestPast = ranPastLease(h)
	v.StaleAccepted, v.StaleRejected = fencedStore(h.Pods)
	v.Monotonic, v.MonotonicNote = fencesMonotonic(h.Jobs, v.Permits > 1)
	v.DuplicateJobs = duplicateJobs(h.Jobs)
	v.SucceededTaken = succeededThoughTaken(h)
	v.Unguarded = unguarded(h)
	v.WrongToken = wrongToken(h.Pods)
	v.AllTerminal, v.TerminalWithin, v.NotTerminal = terminal(h)

	fail := func(format string, args ...any) { v.Failures = append(v.Failures, fmt.Sprintf(format, args...)) }
	if v.StaleAccepted > 0 {
		fail("%d stale writes accepted by the fenced store", v.StaleAccepted)
	}
	if !v.Monotonic {
		fail("fences not strictly increasing: %s", v.MonotonicNote)
	}
	if v.DuplicateJobs > 0 {
		fail("%d claimant(s) with more than one Job", v.DuplicateJobs)
	}
	if len(v.Crashes) > 0 {
		fail("operator crash: %s", strings.Join(v.Crashes, "; "))
	}
	if len(v.SucceededTaken) > 0 && !h.SplitBrain {
		fail("Succeeded (a guarded Job: Released) although the lock was acquired during the run: %s", strings.Join(v.SucceededTaken, ", "))
	}
	if len(v.WrongToken) > 0 {
		fail("%d pod(s) ran with another fencing token than their Job's: %s", len(v.WrongToken), strings.Join(v.WrongToken, ", "))
	}
	if len(v.Unguarded) > 0 {
		fail("guarded Job(s) ran unguarded (the admission gate did not suspend them, or someone else unsuspended them): %s",
			strings.Join(v.Unguarded, ", "))
	}
	if v.Crowded > 0 && !overlapAllowed {
		fail("%d interval(s) with more than %d holders running (most %d, longest %s) although the operator stayed alive and Redis kept its data",
			v.Crowded, v.Permits, v.MostHolders, v.LongestCrowded.Round(time.Millisecond))
	}
	if v.Overlaps > 0 && !overlapAllowed {
		fail("%d overlap(s) of different holders%s (longest %s) although the operator stayed alive and Redis kept its data",
			v.Overlaps, inOneSlot(v.Permits), v.LongestOverlap.Round(time.Millisecond))
	}
	if v.RanPast > 0 && !overlapAllowed {
		fail("%d pod(s) still ran after their lease had ended (longest %s) although the operator stayed alive and Redis kept its data",
			v.RanPast, v.LongestPast.Round(time.Millisecond))
	}
	if !v.AllTerminal {
		fail("not terminal within %s after the fault healed: %s", h.TerminalBound, strings.Join(v.NotTerminal, ", "))
	}
	return v
}

// permits is how many holders the recorded lock admits at once.
func (h history) permits() int { return max(h.Permits, 1) }

// bySlot returns h with every slot 0 when its lock admits one holder: a mutex is one slot, so its
// verdicts cannot depend on what the slot annotations say.
func (h history) bySlot() history {
	if h.permits() > 1 {
		return h
	}
	h.Pods, h.Jobs, h.Leases = slices.Clone(h.Pods), slices.Clone(h.Jobs), slices.Clone(h.Leases)
	for i := range h.Pods {
		h.Pods[i].Slot = 0
	}
	for i := range h.Jobs {
		h.Jobs[i].Slot = 0
	}
	for i := range h.Leases {
		h.Leases[i].Slot = 0
	}
	return h
}

// inOneSlot qualifies an overlap for a semaphore, where holders of different slots may overlap.
func inOneSlot(permits int) string {
	if permits > 1 {
		return " in one slot"
	}
	return ""
}

// crowding sweeps the pods' Running intervals and returns the most different holders running at
// one instant, how many maximal intervals had more than permits of them, and the longest. A pod
// that stops at the instant another starts does not run beside it (as in overlaps).
func crowding(pods []podSpan, permits int) (most, crowded int, longest time.Duration) {
	type edge struct {
		at     time.Time
		holder string
		delta  int
	}
	edges := make([]edge, 0, 2*len(pods))
	for _, p := range pods {
		if p.End.After(p.Start) {
			edges = append(edges, edge{p.Start, p.holder(), +1}, edge{p.End, p.holder(), -1})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), a.delta-b.delta) })
	running := map[string]int{} // holder -> its pods running now
	var since time.Time
	inCrowd := false
	for _, e := range edges {
		running[e.holder] += e.delta
		if running[e.holder] == 0 {
			delete(running, e.holder)
		}
		most = max(most, len(running))
		switch {
		case len(running) > permits && !inCrowd:
			inCrowd, since = true, e.at
		case len(running) <= permits && inCrowd:
			inCrowd = false
			crowded++
			longest = max(longest, e.at.Sub(since))
		}
	}
	return most, crowded, longest
}

// overlaps counts the pairs of pods of different holders of one slot whose
// Running intervals intersect, and the longest intersection.
func overlaps(pods []podSpan) (int, time.Duration) {
	n, longest := 0, time.Duration(0)
	for i := range pods {
		for j := i + 1; j < len(pods); j++ {
			a, b := pods[i], pods[j]
			if a.holder() == b.holder() || a.Slot != b.Slot {
				continue
			}
			d := minTime(a.End, b.End).Sub(maxTime(a.Start, b.Start))
			if d <= 0 {
				continue
			}
			n++
			longest = max(longest, d)
		}
	}
	return n, longest
}

// ranPastLease counts the pods that were still running after their holder's
// lease had ended, and the longest such run.
func ranPastLease(h history) (int, time.Duration) {
	n, longest := 0, time.Duration(0)
	for _, p := range h.Pods {
		end, ok := leaseEnd(h, p)
		if !ok {
			continue
		}
		past := p.End.Sub(end)
		if p.Stopped && past <= stopSeenLate {
			continue // seen stopped after the release, stopped before it (stopSeenLate)
		}
		if past > 0 {
			n++
			longest = max(longest, past)
		}
	}
	return n, longest
}

// leaseEnd is the earliest known end of the lease under which pod p started:
// the end of its holder's lease as seen in Redis (the first one that ends
// after the pod started), or, if earlier, the moment another holder's Job of
// the same slot appeared (that holder had acquired the slot, so p's lease was
// over). ok is false when
// neither is known (the lease outlived the recording).
func leaseEnd(h history, p podSpan) (time.Time, bool) {
	var end time.Time
	for _, l := range h.Leases {
		if l.Holder == p.holder() && l.End.After(p.Start) && (end.IsZero() || l.End.Before(end)) {
			end = l.End
		}
	}
	for _, j := range h.Jobs {
		if j.holder() != p.holder() && j.Slot == p.Slot && j.Added.After(p.Start) && (end.IsZero() || j.Added.Before(end)) {
			end = j.Added
		}
	}
	return end, !end.IsZero()
}

// write is one simulated write of a pod to the fenced store.
type write struct {
	at     time.Time
	fence  int64
	writer string // Job UID
	slot   int    // the partition it writes to
}

// partition is one slot's part of the fenced store: the highest token it has
// seen and the writer that brought it.
type partition struct {
	highest int64
	owner   string
}

// fencedStore replays every pod's writes (one at the start of its Running
// interval, then one every writeEvery until it stops) in time order against a
// store that accepts a write only if its token is >= the highest its slot's
// partition has seen (a semaphore's fences rise within a slot only, so each
// slot is fenced on its own; a mutex has one). A rejected write is a stale
// holder the fence stopped. An accepted write is stale when another writer
// (another Job) already wrote to the partition with the same token: the store
// cannot tell them apart, so two runs share one token.
func fencedStore(pods []podSpan) (accepted, rejected int) {
	var writes []write
	for _, p := range pods {
		for t := p.Start; !t.After(p.End); t = t.Add(writeEvery) {
			writes = append(writes, write{at: t, fence: p.Fence, writer: p.JobUID, slot: p.Slot})
		}
	}
	slices.SortStableFunc(writes, func(a, b write) int { return a.at.Compare(b.at) })
	store := map[int]*partition{}
	for _, w := range writes {
		part := store[w.slot]
		if part == nil {
			part = &partition{highest: -1}
			store[w.slot] = part
		}
		switch {
		case w.fence < part.highest:
			rejected++
		case w.fence > part.highest:
			part.highest, part.owner = w.fence, w.writer
		case w.writer != part.owner:
			accepted++
		}
	}
	return accepted, rejected
}

// fencesMonotonic checks that, within each slot, fences strictly increase in
// the order the Jobs appeared, across both clusters: the order in which
// holders acquired the slot. A semaphore promises nothing across slots;
// slotted names the slot in the note.
func fencesMonotonic(jobs []jobEntry, slotted bool) (bool, string) {
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b jobEntry) int { return a.Added.Compare(b.Added) })
	last := map[int]jobEntry{} // slot -> its latest Job so far
	for _, cur := range sorted {
		prev, ok := last[cur.Slot]
		last[cur.Slot] = cur
		if !ok || cur.Fence > prev.Fence {
			continue
		}
		note := fmt.Sprintf("%s/%s fence %d appeared %s after %s/%s fence %d",
			cur.Cluster, cur.Name, cur.Fence, cur.Added.Sub(prev.Added).Round(time.Millisecond), prev.Cluster, prev.Name, prev.Fence)
		if slotted {
			note += fmt.Sprintf(" in slot %d", cur.Slot)
		}
		return false, note
	}
	return true, ""
}

// duplicateJobs counts the claimants that owned more than one Job (by UID: a
// Job recreated under the same name counts twice).
func duplicateJobs(jobs []jobEntry) int {
	uids := map[string]map[string]bool{}
	for _, j := range jobs {
		if uids[j.holder()] == nil {
			uids[j.holder()] = map[string]bool{}
		}
		uids[j.holder()][j.UID] = true
	}
	n := 0
	for _, set := range uids {
		if len(set) > 1 {
			n++
		}
	}
	return n
}

// succeededThoughTaken lists the claimants that report Succeeded (a guarded
// Job: Released; see claimsUnbroken) although
// another holder's Job of the same slot appeared while their own Job ran (that
// holder had acquired their slot): from its creation to
// the end of its last pod (the Job's own Complete condition when it had no
// pod; the condition can trail the pods by many seconds after an API server
// outage, and the workload is what must not share the lock).
func succeededThoughTaken(h history) []string {
	end := map[string]time.Time{} // Job UID -> end of its last pod
	for _, p := range h.Pods {
		end[p.JobUID] = maxTime(end[p.JobUID], p.End)
	}
	var out []string
	for _, lj := range h.Claimants {
		if !lj.claimsUnbroken() {
			continue
		}
		for _, own := range h.Jobs {
			if own.holder() != lj.holder() {
				continue
			}
			until, ok := end[own.UID]
			if !ok {
				until = own.Finished
			}
			for _, other := range h.Jobs {
				if other.holder() != lj.holder() && other.Slot == own.Slot && other.Added.After(own.Added) && other.Added.Before(until) {
					out = append(out, fmt.Sprintf("%s (%s acquired %s into its run)", lj.holder(), other.holder(),
						other.Added.Sub(own.Added).Round(time.Millisecond)))
					break
				}
			}
		}
	}
	return out
}

// unguarded lists the guarded Jobs recorded Unguarded: in these scenarios every guarded Job is
// created through the admission gate, so one that ran without its suspension ran outside the
// lock, and no fence covered it.
func unguarded(h history) []string {
	var out []string
	for _, c := range h.Claimants {
		if c.Phase == guardUnguarded {
			out = append(out, c.holder())
		}
	}
	return out
}

// wrongToken lists the pods whose token is not the one their Job recorded when its holder acquired:
// such a pod writes under someone else's place in the fencing order (or under none), which the
// fenced store can only partly see (a lower token is refused, as from a stale holder). A guarded
// Job's pods read the token from the pod template the operator's unsuspension wrote, apart from
// the Job's own record, so the two can part.
func wrongToken(pods []podSpan) []string {
	var out []string
	for _, p := range pods {
		if p.Fence != p.JobFence {
			out = append(out, fmt.Sprintf("%s/%s (%d, its Job's %d)", p.Cluster, p.Name, p.Fence, p.JobFence))
		}
	}
	return out
}

// terminal reports whether every claimant reached a terminal phase within
// the bound after the fault healed, and the latest such time.
func terminal(h history) (bool, time.Duration, []string) {
	all, latest := true, time.Duration(0)
	var missing []string
	for _, lj := range h.Claimants {
		if lj.TerminalAt.IsZero() || lj.TerminalAt.Sub(h.HealedAt) > h.TerminalBound {
			all = false
			missing = append(missing, lj.holder()+"("+cmp.Or(lj.Phase, "no phase")+")")
			continue
		}
		latest = max(latest, lj.TerminalAt.Sub(h.HealedAt))
	}
	return all, latest, missing
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ---------------------------------------------------------------- table

// table renders the verdicts as one Markdown table, the form docs/fault.md
// keeps.
func table(vs []verdict) string {
	var b strings.Builder
	b.WriteString("| scenario | most holders at once / permits | overlaps | longest overlap | ran past lease | stale writes accepted | stale writes rejected | fences monotonic | all terminal within | duplicate Jobs | trace | result |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- |\n")
	for _, v := range vs {
		mono := "yes"
		if !v.Monotonic {
			mono = "NO"
		}
		term := v.TerminalWithin.Round(100 * time.Millisecond).String()
		if !v.AllTerminal {
			term = "NO (" + strings.Join(v.NotTerminal, ", ") + ")"
		}
		overl := fmt.Sprint(v.Overlaps)
		if v.OverlapAllowed {
			overl += " (allowed)"
		}
		result := "pass"
		if v.Failed() {
			result = "FAIL: " + strings.Join(v.Failures, "; ")
		}
		past := "0"
		if v.RanPast > 0 {
			past = fmt.Sprintf("%d (%s)", v.RanPast, v.LongestPast.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %s | %s | %d | %s | %s |\n", v.Scenario, holdersCell(v), overl,
			v.LongestOverlap.Round(time.Millisecond), past, v.StaleAccepted, v.StaleRejected, mono, term, v.DuplicateJobs, cmp.Or(v.Trace, "-"), result)
	}
	return b.String()
}

// holdersCell shows the most holders seen running at once against the permits, and, when there
// were more, how often and for how long at most.
func holdersCell(v verdict) string {
	cell := fmt.Sprintf("%d / %d", v.MostHolders, v.Permits)
	if v.Crowded == 0 {
		return cell
	}
	allowed := ""
	if v.OverlapAllowed {
		allowed = ", allowed"
	}
	return cell + fmt.Sprintf(" (%d interval(s) over, longest %s%s)", v.Crowded, v.LongestCrowded.Round(time.Millisecond), allowed)
}
