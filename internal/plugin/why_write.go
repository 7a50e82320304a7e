package plugin

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// write says the explanation in sentences, then lists the Events.
func (e *Explanation) write(out io.Writer, now time.Time) error {
	var b strings.Builder
	if e.Invalid != "" {
		fmt.Fprintf(&b, "Job %s/%s carries the label %s=%s, but the operator cannot guard it: %s.\n", e.Namespace, e.Name,
			batchv1alpha1.LabelGuardLock, e.Lock, e.Invalid)
		b.WriteString("It asks for no lock and is in no queue until its label and annotations parse (the admission gate refuses such a Job: this one came in without it).\n")
	} else {
		fmt.Fprintf(&b, "%s %s/%s runs under lock %s (scope %s, priority %d).\n", cmp.Or(e.Kind, locks.KindLockedJob), e.Namespace, e.Name,
			e.Lock, e.Scope, e.Priority)
	}
	switch {
	case e.Invalid != "":
	case e.Kind == locks.KindJob:
		e.writeGuard(&b, now)
	case e.Ending != nil:
		e.writeEnding(&b, now)
	case e.Phase == batchv1alpha1.PhaseWaiting:
		e.writeWaiting(&b, now)
	case e.Phase == batchv1alpha1.PhaseRunning:
		e.writeRunning(&b, now)
	default:
		phase := cmp.Or(string(e.Phase), "not yet reconciled")
		fmt.Fprintf(&b, "It is %s: it has not asked for the lock yet.", phase)
		if e.Message != "" {
			fmt.Fprintf(&b, " %s.", strings.TrimSuffix(e.Message, "."))
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	return e.writeEvents(out, now)
}

func (e *Explanation) writeWaiting(b *strings.Builder, now time.Time) {
	if e.PermitsUnsupported {
		e.writePermitsUnsupported(b)
		return
	}
	if e.Kind == locks.KindJob {
		b.WriteString("It is waiting, suspended by the admission gate until the operator holds the lock for it.")
	} else {
		b.WriteString("It is Waiting.")
	}
	cluster := e.Scope == batchv1alpha1.LockScopeCluster
	if e.semaphore() {
		e.writeSemaphoreHolders(b, now)
	} else {
		e.writeHolder(b, now)
	}
	switch p := e.Place; {
	case e.Kind == locks.KindJob:
		b.WriteString("A guarded Job records no place in line; those ahead of it are the waiters you can read, in the queue's order.\n")
	case p == nil:
		b.WriteString("Its place in line is not known yet.\n")
	case p.Exact > 0:
		next := ""
		if p.Exact == 1 {
			next = " (next)"
		}
		fmt.Fprintf(b, "It is number %d in line%s.\n", p.Exact, next)
	default:
		fmt.Fprintf(b, "It is further back than number %d in line (exact places are shown for the first 3 only).\n", p.MoreThan)
	}
	if len(e.Ahead) == 0 {
		b.WriteString("No waiter of this lock is ahead of it.\n")
		return
	}
	fmt.Fprintf(b, "%d ahead of it, in the order the queue serves them (higher priority first, then older):\n", len(e.Ahead))
	for i, w := range e.Ahead {
		fmt.Fprintf(b, "  %d. %s, priority %d", i+1, ref(w.Kind, w.Namespace, w.Name, cluster || w.Namespace != e.Namespace), w.Priority)
		if w.WaitingSince != nil {
			fmt.Fprintf(b, ", waiting for %s", since(now, w.WaitingSince))
		}
		b.WriteString("\n")
	}
}

// writeHolder names the one holder of a plain lock.
func (e *Explanation) writeHolder(b *strings.Builder, now time.Time) {
	switch h := e.Holder; {
	case h == nil && e.Kind == locks.KindJob:
		b.WriteString(" No LockedJob or guarded Job you can read holds it, and no waiting LockedJob was told who does.")
	case h == nil:
		b.WriteString(" The holder is not named in its status: waiters far back in line are not told it.")
	case h.Name == "":
		fmt.Fprintf(b, " The lock is held by %s (no LockedJob you can read).", h.Identity)
	default:
		fmt.Fprintf(b, " The lock is held by %s", holderCell(h, e.Scope == batchv1alpha1.LockScopeCluster || h.Namespace != e.Namespace, false))
		if h.AcquiredAt != nil {
			fmt.Fprintf(b, ", which has held it for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
		}
		b.WriteString(".")
	}
	b.WriteString("\n")
}

// writeSemaphoreHolders says how many of the lock's permits are in use and lists the holders by
// slot, one a line, as its status tells. A holder only Redis names (at this waiter's last attempt)
// is one of them, not a count.
func (e *Explanation) writeSemaphoreHolders(b *strings.Builder, now time.Time) {
	switch {
	case len(e.Holders) == 1 && e.Holders[0].Name == "":
		fmt.Fprintf(b, " %s; at its last attempt Redis named %s (no LockedJob you can read) as a holder.\n", e.permitsPhrase(), e.Holders[0].Identity)
		return
	case len(e.Holders) == 0:
		fmt.Fprintf(b, " %s; no LockedJob you can read holds it.\n", e.permitsPhrase())
		return
	}
	fmt.Fprintf(b, " %s, by:\n", e.inUsePhrase())
	cluster := e.Scope == batchv1alpha1.LockScopeCluster
	for i := range e.Holders {
		h := &e.Holders[i]
		b.WriteString("  ")
		if h.Slot != nil {
			fmt.Fprintf(b, "slot %d: ", *h.Slot)
		}
		b.WriteString(holderCell(h, cluster || h.Namespace != e.Namespace, false))
		if h.AcquiredAt != nil {
			fmt.Fprintf(b, ", holding for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
}

// semaphore reports whether the lock admits several holders, or still has one above slot 0 after
// its permits were lowered: then the sentences name slots.
func (e *Explanation) semaphore() bool {
	return e.Permits > 1 || slotsAbove0(e.Holders) || (e.Slot != nil && *e.Slot > 0)
}

// permitsPhrase is "The lock has 3 permits", or, when its Lock could not be read, that the number
// is unknown.
func (e *Explanation) permitsPhrase() string {
	if e.Permits == 0 {
		return "The lock is a semaphore whose number of permits is not known (its Lock could not be read)"
	}
	return fmt.Sprintf("The lock has %d permits", e.Permits)
}

// inUsePhrase is "2 of the lock's 3 permits are in use", or without the 3 when the number is
// unknown.
func (e *Explanation) inUsePhrase() string {
	verb := "are"
	if e.InUse == 1 {
		verb = "is"
	}
	if e.Permits == 0 {
		return fmt.Sprintf("%d of the lock's permits (how many it has is not known: its Lock could not be read) %s in use", e.InUse, verb)
	}
	return fmt.Sprintf("%d of the lock's %d permits %s in use", e.InUse, e.Permits, verb)
}

// writePermitsUnsupported explains a waiter the operator does not queue at all: its lock declares
// more permits than Redlock can grant (controllers.waitForPermits).
func (e *Explanation) writePermitsUnsupported(b *strings.Builder) {
	kind := sourceLock
	if e.Scope == batchv1alpha1.LockScopeCluster {
		kind = sourceClusterLock
	}
	declares := "more than one permit"
	if e.Permits > 1 {
		declares = fmt.Sprintf("%d permits", e.Permits)
	}
	fmt.Fprintf(b, "It is Waiting, and cannot acquire the lock as things stand: the %s %s declares %s (a semaphore), "+
		"and the operator's Redis is Redlock, which admits one holder per lock.\n", kind, e.Lock, declares)
	fmt.Fprintf(b, "It is not in the lock's queue. It waits until the %s declares 1 permit (spec.permits), or the operator "+
		"uses a Redis that is not Redlock (a single server, Sentinel or Redis Cluster).\n", kind)
}

func (e *Explanation) writeRunning(b *strings.Builder, now time.Time) {
	if e.ReleasedAt != nil {
		fmt.Fprintf(b, "It is Running: its pod succeeded and it released the lock %s ago (%s); its phase follows when its Job finishes.\n",
			since(now, e.ReleasedAt), e.ReleasedAt.UTC().Format(time.RFC3339))
		if j := e.Job; j != nil {
			e.writeJob(b, j)
		}
		return
	}
	if e.Kind == locks.KindJob {
		b.WriteString("Its guard is Held: the operator holds the lock for it")
	} else {
		b.WriteString("It is Running: it holds the lock")
	}
	if e.Slot != nil && e.semaphore() {
		fmt.Fprintf(b, " in slot %d", *e.Slot)
	}
	if e.FencingToken != nil {
		fmt.Fprintf(b, " with fencing token %d", *e.FencingToken)
	}
	if h := e.Holder; h != nil && h.AcquiredAt != nil {
		fmt.Fprintf(b, " and has held it for %s (since %s)", since(now, h.AcquiredAt), h.AcquiredAt.UTC().Format(time.RFC3339))
	}
	b.WriteString(".\n")
	if e.semaphore() {
		fmt.Fprintf(b, "%s.\n", e.inUsePhrase())
	}
	if j := e.Job; j != nil {
		e.writeJob(b, j)
	}
	if e.Behind > 0 {
		fmt.Fprintf(b, "%d waiting for the lock after it.\n", e.Behind)
	}
}

func (e *Explanation) writeJob(b *strings.Builder, j *JobState) {
	if e.Kind == locks.KindJob {
		fmt.Fprintf(b, "It has %d active, %d succeeded and %d failed pods.\n", j.Active, j.Succeeded, j.Failed)
		return
	}
	if !j.Exists {
		fmt.Fprintf(b, "Its Job %s is gone.\n", j.Name)
		return
	}
	fmt.Fprintf(b, "Its Job %s has %d active, %d succeeded and %d failed pods.\n", j.Name, j.Active, j.Succeeded, j.Failed)
}

func (e *Explanation) writeEnding(b *strings.Builder, now time.Time) {
	end := e.Ending
	fmt.Fprintf(b, "It ended %s %s ago (%s), reason %s", end.Phase, since(now, &end.At), end.At.UTC().Format(time.RFC3339), end.Reason)
	if end.Message != "" {
		fmt.Fprintf(b, ": %s", strings.TrimSuffix(end.Message, "."))
	}
	b.WriteString(".\n")
	e.writeRan(b)
}

// writeRan says the fence it ran under and its Job's pods, once it ended.
func (e *Explanation) writeRan(b *strings.Builder) {
	if e.FencingToken != nil {
		fmt.Fprintf(b, "It ran with fencing token %d.\n", *e.FencingToken)
	}
	if j := e.Job; j != nil {
		e.writeJob(b, j)
	}
}

// writeGuard says where a guarded Job stands, by its guard (guardOf): waiting and held as a
// LockedJob waits and runs, the rest from what the operator recorded on it.
func (e *Explanation) writeGuard(b *strings.Builder, now time.Time) {
	switch e.Guard {
	case guardWaiting:
		e.writeWaiting(b, now)
	case batchv1alpha1.GuardHeld:
		e.writeRunning(b, now)
	case batchv1alpha1.GuardReleased:
		b.WriteString("Its guard is Released: the Job ended and the operator released the lock.\n")
		e.writeRan(b)
	case batchv1alpha1.GuardLost:
		b.WriteString("Its guard is Lost: the lock was lost while the Job held it, and its on-lock-lost policy was applied (its Events say which).\n")
		e.writeRan(b)
	case batchv1alpha1.GuardUnguarded:
		b.WriteString("Its guard is Unguarded: it runs, or ran, without the operator holding its lock (it was not created suspended by the admission gate, " +
			"or someone else unsuspended it), so the lock does not cover it and it is never a holder.\n")
		e.writeRan(b)
	case batchv1alpha1.GuardScopeNotAllowed:
		fmt.Fprintf(b, "Its guard is ScopeNotAllowed: it asks for Cluster scope, which the operator does not let namespace %s use "+
			"(its --cluster-scope-namespaces). It stays suspended and is in no queue.\n", e.Namespace)
	case "":
		b.WriteString("It is not suspended, and the operator has recorded nothing on it: it was not created suspended by the admission gate, " +
			"so it runs without the lock (the operator marks it Unguarded).\n")
		e.writeRan(b)
	default:
		fmt.Fprintf(b, "Its guard annotation %s says %q, which the operator does not write.\n", batchv1alpha1.AnnotationGuard, e.Guard)
	}
}

func (e *Explanation) writeEvents(out io.Writer, now time.Time) error {
	if len(e.Events) == 0 {
		_, err := fmt.Fprintln(out, "No Events (the API server keeps them for an hour by default).")
		return err
	}
	var rows strings.Builder
	rows.WriteString("Last Events:\n  AGE\tTYPE\tREASON\tMESSAGE\n")
	for _, ev := range e.Events {
		age := since(now, &ev.At)
		if ev.Count > 1 {
			age = fmt.Sprintf("%s (x%d)", age, ev.Count)
		}
		fmt.Fprintf(&rows, "  %s\t%s\t%s\t%s\n", age, ev.Type, ev.Reason, ev.Note)
	}
	return writeTable(out, rows.String())
}
