//go:build fault

package fault

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/redis/go-redis/v9"
)

const (
	// ttl is every LockedJob's lock ttl (renewed every ttl/3 by default).
	ttl = 3 * time.Second
	// pastTTL is how long a fault that must outlast a lease is held.
	pastTTL = 3 * ttl / 2
	// terminalBound is how long after the fault healed every LockedJob must
	// be terminal: a waiter's backoff (1 s), its run, and the loser's policy,
	// with room for a loaded 2-core machine.
	terminalBound = 40 * time.Second
	// settleTimeout bounds the wait for the last pods to stop once every
	// LockedJob is terminal.
	settleTimeout = 30 * time.Second
)

// scenario is one fault, injected while LockedJobs of both clusters contend
// for one lock of scope Cluster.
type scenario struct {
	name string
	// overlapAllowed: the fault pauses or kills a process, or Redis loses
	// data, so two holders may run at once (the fence must protect).
	overlapAllowed bool
	// splitBrain: the scenario partitions a Sentinel master away with one operator still on it
	// (history.SplitBrain).
	splitBrain bool
	// leaseA is operator a's leader-election setting for this scenario.
	leaseA leaseMode
	// slowableA puts operator a's path to its API server through the cluster's API proxy.
	slowableA bool
	// permits, when more than 1, makes the scenario's lock a semaphore: a ClusterLock named after
	// the lock declares them in both clusters before the first LockedJob, and goes at the end.
	permits int
	// run injects the fault and returns when it healed.
	run func(r *run) (healedAt time.Time, err error)
	// verify, if set, judges what only this scenario promises, from the recorded history and the
	// operators' logs; each string is a failure.
	verify func(r *run, h history) []string
	// untraced says why the queue model cannot follow what Redis ran in this scenario ("": it can,
	// and the trace is checked; see trace_test.go).
	untraced string
	// disturbs names the clusters whose operator the fault hits (kills, pauses, restarts, cuts off
	// from Redis or slows): only their claimants may, in the trace's model, crash and come back or
	// miss a reply.
	disturbs []string
}

// run is one scenario's state while it runs.
type run struct {
	t     *testing.T
	sc    scenario
	ns    string
	lock  string
	ctx   context.Context
	start time.Time

	leases leaseWatchers
	// marks are where each operator's logs stood when the scenario started.
	marks map[string]testkit.LogMark
	// faultAt is when a scenario that records it injected its fault.
	faultAt time.Time

	mu       sync.Mutex
	terminal map[string]claimantEntry // LockedJobs: holder -> last seen, with the first terminal time
	// guarded are the holders of the guarded Jobs the scenario created, each of which must be seen
	// terminal (the recorders keep their states).
	guarded []string
	// allowOverlap is set by a scenario that learns during the run that a
	// process went away (e.g. an operator that lost its leadership).
	allowOverlap bool
	// redis, when set, is the Redis the scenario moved the operators to (redis-reshard, the split
	// brain's master); the suite's own otherwise.
	redis redis.UniversalClient
}

// lockRedis is a client of the Redis the scenario's lock lives in.
func (r *run) lockRedis() redis.Cmdable {
	if r.redis != nil {
		return r.redis
	}
	return env.redisClient
}

// runScenario runs one scenario in its own subtest and returns its verdict;
// ok is false when the harness itself failed (no verdict).
func runScenario(t *testing.T, sc scenario) (v verdict, ok bool) {
	t.Run(sc.name, func(t *testing.T) {
		for name, o := range env.operators {
			mode, slowable := steadyLease, false
			if name == "a" {
				mode, slowable = sc.leaseA, sc.slowableA
			}
			if err := o.ensure(mode, slowable); err != nil {
				t.Fatalf("operator %s: %v", name, err)
			}
		}
		passAll()
		ctx := t.Context()
		r := &run{t: t, sc: sc, ns: namespacePrefix + sc.name, lock: "lock-" + sc.name, ctx: ctx, start: time.Now(),
			terminal: map[string]claimantEntry{}}
		marks := map[string]testkit.LogMark{}
		for name, o := range env.operators {
			marks[name] = o.mark()
		}
		r.marks = marks
		for _, c := range env.clusters {
			if err := c.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil {
				t.Fatalf("create namespace %s in %s: %v", r.ns, c.name, err)
			}
		}
		if sc.permits > 1 {
			if err := r.declarePermits(sc.permits); err != nil {
				t.Fatalf("scenario %s: %v", sc.name, err) // a harness failure: no verdict
			}
		}
		go r.watchLockedJobs()
		// The Sentinel scenario's lock lives on another Redis: no leases seen
		// there, and the checker falls back to the next holder's Job.
		r.leases = watchLeases(ctx, env.redis.Addr(), r.lock, sc.permits)
		seen := r.recordTrace()

		healedAt, err := sc.run(r)
		if err != nil {
			t.Fatalf("scenario %s: %v", sc.name, err) // a harness failure: no verdict
		}
		passAll()
		logf("%s: fault healed after %s", sc.name, healedAt.Sub(r.start).Round(time.Millisecond))
		if err := poll(time.Until(healedAt.Add(terminalBound)), r.allTerminal); err != nil {
			logf("%s: %v", sc.name, err) // reported by the checker
		}
		if err := poll(settleTimeout, func() (bool, string) {
			return r.settled(), "pods still running in " + r.ns
		}); err != nil {
			logf("%s: %v", sc.name, err)
		}

		h := r.history(healedAt)
		for name, o := range env.operators {
			h.Crashes = append(h.Crashes, o.takeCrashes(marks[name])...)
		}
		v = check(sc.name, h, sc.overlapAllowed || r.allowOverlap)
		if sc.verify != nil {
			v.Failures = append(v.Failures, sc.verify(r, h)...)
		}
		var failure string
		if v.Trace, failure = r.checkTrace(seen, h); failure != "" {
			v.Failures = append(v.Failures, failure)
		}
		if sc.permits > 1 {
			// The operators must let the ClusterLock go: a finalizer left behind is theirs.
			if err := r.dropPermits(); err != nil {
				v.Failures = append(v.Failures, err.Error())
			}
		}
		ok = true
		r.logHistory(h, v)
		if v.Failed() {
			t.Errorf("%s:\n  %s", sc.name, strings.Join(v.Failures, "\n  "))
		}
	})
	return v, ok
}

// passAll heals every path a scenario may have broken: the operators' to Redis and to their API
// servers.
func passAll() {
	for _, p := range env.proxies {
		p.Pass()
	}
	for _, c := range env.clusters {
		c.apiProxy.Pass()
	}
}

// ---------------------------------------------------------------- LockedJobs

// create creates a LockedJob in cluster c on the scenario's lock, of scope Cluster so both
// clusters' LockedJobs contend for it; o.TTL defaults to ttl, and o.Lock and o.Scope are the
// scenario's.
func (r *run) create(c *cluster, name string, o testkit.LockedJobOptions) error {
	o.Lock, o.Scope, o.TTL, o.App = r.lock, batchv1alpha1.LockScopeCluster, cmp.Or(o.TTL, ttl), "fault"
	if err := c.k8s.Create(r.ctx, testkit.NewLockedJob(r.ns, name, o)); err != nil {
		return fmt.Errorf("create LockedJob %s in %s: %w", name, c.name, err)
	}
	return nil
}

// waitRunning waits until a pod of the claimant (a LockedJob's name, or guardedClaimant of a
// guarded Job) runs.
func (r *run) waitRunning(c *cluster, claimant string) error {
	return poll(60*time.Second, func() (bool, string) {
		return c.runningPods(r.ns, claimant) > 0, fmt.Sprintf("no Running pod of %s/%s", c.name, claimant)
	})
}

// waitWaiting waits until the LockedJob reports that it waits for the lock.
func (r *run) waitWaiting(c *cluster, name string) error {
	const phase = batchv1alpha1.PhaseWaiting
	return poll(60*time.Second, func() (bool, string) {
		lj := &batchv1alpha1.LockedJob{}
		if err := c.k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, lj); err != nil {
			return false, err.Error()
		}
		return lj.Status.Phase == phase, fmt.Sprintf("%s/%s is %q (%s), not %s", c.name, name, lj.Status.Phase, lj.Status.Message, phase)
	})
}

// holderAndWaiter is the set-up of most fault scenarios: a1 in cluster a holds
// the lock and its pod runs for holderRun; b1 in cluster b waits for it.
func (r *run) holderAndWaiter(holderRun time.Duration, o testkit.LockedJobOptions) error {
	a, b := env.clusters["a"], env.clusters["b"]
	o.Run = holderRun
	if err := r.create(a, "a1", o); err != nil {
		return err
	}
	if err := r.waitRunning(a, "a1"); err != nil {
		return err
	}
	if err := r.create(b, "b1", testkit.LockedJobOptions{Run: 2 * time.Second, TTL: o.TTL}); err != nil {
		return err
	}
	return r.waitWaiting(b, "b1")
}

// hold keeps a fault for d: the experiment's own duration, not a wait for
// something to happen.
func hold(d time.Duration) { time.Sleep(d) }

// ---------------------------------------------------------------- observing LockedJobs

func terminalPhase(p batchv1alpha1.LockedJobPhase) bool {
	return p == batchv1alpha1.PhaseSucceeded || p == batchv1alpha1.PhaseFailed || p == batchv1alpha1.PhaseLockLost
}

// watchLockedJobs polls both clusters' LockedJobs every 100 ms until the
// scenario ends and stamps when each is first seen terminal (a LockedJob that
// was deleted and is gone counts as terminal, phase "Deleted"). A cluster
// whose API server is down is simply not seen meanwhile.
func (r *run) watchLockedJobs() {
	for r.ctx.Err() == nil {
		now := time.Now()
		for _, c := range env.clusters {
			var list batchv1alpha1.LockedJobList
			if err := c.k8s.List(r.ctx, &list, client.InNamespace(r.ns)); err != nil {
				continue
			}
			r.mu.Lock()
			seen := map[string]bool{}
			for _, lj := range list.Items {
				key := holder(c.name, r.ns, lj.Name)
				seen[key] = true
				e := r.terminal[key]
				e.Cluster, e.Namespace, e.Name = c.name, r.ns, lj.Name
				e.Phase, e.Message = string(lj.Status.Phase), lj.Status.Message
				e.Conditions = nil
				for _, c := range lj.Status.Conditions {
					e.Conditions = append(e.Conditions, c.Type+"="+string(c.Status)+"/"+c.Reason)
				}
				if terminalPhase(lj.Status.Phase) && e.TerminalAt.IsZero() {
					e.TerminalAt = now
				}
				r.terminal[key] = e
			}
			for key, e := range r.terminal {
				if e.Cluster == c.name && !seen[key] && e.Phase != "Deleted" {
					e.Phase = "Deleted"
					if e.TerminalAt.IsZero() {
						e.TerminalAt = now
					}
					r.terminal[key] = e
				}
			}
			r.mu.Unlock()
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *run) allTerminal() (bool, string) {
	var open []string
	guarded := map[string]claimantEntry{}
	for _, c := range env.clusters {
		for _, e := range c.guardedJobs(r.ns) {
			guarded[e.holder()] = e
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, e := range r.terminal {
		if e.TerminalAt.IsZero() {
			open = append(open, key+"="+e.Phase)
		}
	}
	for _, key := range r.guarded {
		if e, ok := guarded[key]; !ok || e.TerminalAt.IsZero() {
			open = append(open, key+"="+cmp.Or(e.Phase, "not seen"))
		}
	}
	return len(r.terminal)+len(r.guarded) > 0 && len(open) == 0, "not terminal: " + strings.Join(open, ", ")
}

func (r *run) settled() bool {
	for _, c := range env.clusters {
		if !c.podsSettled(r.ns) {
			return false
		}
	}
	return true
}

// history collects the scenario's record from both clusters.
func (r *run) history(healedAt time.Time) history {
	now := time.Now()
	h := history{Permits: max(r.sc.permits, 1), HealedAt: healedAt, TerminalBound: terminalBound, Leases: r.leases.all(),
		SplitBrain: r.sc.splitBrain}
	events := r.events()
	for _, c := range env.clusters {
		jobs, pods := c.history(r.ns, now)
		h.Jobs = append(h.Jobs, jobs...)
		h.Pods = append(h.Pods, pods...)
		for _, e := range c.guardedJobs(r.ns) {
			e.Events = events[e.holder()]
			h.Claimants = append(h.Claimants, e)
		}
	}
	r.mu.Lock()
	for key, e := range r.terminal {
		e.Events = events[key]
		h.Claimants = append(h.Claimants, e)
	}
	r.mu.Unlock()
	slices.SortFunc(h.Claimants, func(a, b claimantEntry) int { return strings.Compare(a.holder(), b.holder()) })
	slices.SortFunc(h.Jobs, func(a, b jobEntry) int { return a.Added.Compare(b.Added) })
	slices.SortFunc(h.Pods, func(a, b podSpan) int { return a.Start.Compare(b.Start) })
	return h
}

// events returns the reasons of each claimant's Events, oldest first: a LockedJob's, and a guarded
// Job's (the operator's and the Job controller's, on the Job).
func (r *run) events() map[string][]string {
	out := map[string][]string{}
	for _, c := range env.clusters {
		var list corev1.EventList
		if err := c.k8s.List(r.ctx, &list, client.InNamespace(r.ns)); err != nil {
			continue
		}
		guarded := map[string]bool{}
		for _, j := range c.rec.History().InNamespace(r.ns).Jobs {
			guarded[j.Name] = j.Guarded
		}
		slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		for _, e := range list.Items {
			name := e.InvolvedObject.Name
			if e.InvolvedObject.Kind == "Job" && guarded[name] {
				name = guardedClaimant(name)
			} else if e.InvolvedObject.Kind != "LockedJob" {
				continue
			}
			key := holder(c.name, r.ns, name)
			reason := e.Reason
			if e.Count > 1 {
				reason += fmt.Sprintf("x%d", e.Count)
			}
			out[key] = append(out[key], reason)
		}
	}
	return out
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.FirstTimestamp.Time, e.LastTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return e.CreationTimestamp.Time
}

// logHistory prints the scenario's timeline relative to its start, so a
// failure can be read without the logs.
func (r *run) logHistory(h history, v verdict) {
	var b strings.Builder
	fmt.Fprintf(&b, "----- %s (start %s, healed %s) -----\n", r.sc.name, r.start.Format("15:04:05.000"), rel(h.HealedAt, r.start))
	for _, l := range h.Leases {
		fmt.Fprintf(&b, "lease %s slot=%d from %s until %s (longest gap between renewals %s, least left %s)\n", l.Holder,
			l.Slot, rel(l.Start, r.start), rel(l.End, r.start), l.LongestGap.Round(time.Millisecond), l.LeastLeft.Round(time.Millisecond))
	}
	for _, j := range h.Jobs {
		fmt.Fprintf(&b, "job  %s/%-14s for=%-7s fence=%d slot=%d uid=%.8s added=%s finished=%s\n", j.Cluster, j.Name, j.Claimant, j.Fence,
			j.Slot, j.UID, rel(j.Added, r.start), rel(j.Finished, r.start))
	}
	for _, p := range h.Pods {
		fmt.Fprintf(&b, "pod  %s/%-22s job=%.8s fence=%d slot=%d running %s .. %s (terminating from %s)\n", p.Cluster, p.Name, p.JobUID,
			p.Fence, p.Slot, rel(p.Start, r.start), rel(p.End, r.start), rel(p.Terminating, r.start))
	}
	for _, l := range h.Claimants {
		fmt.Fprintf(&b, "for  %s phase=%s terminal=%s events=%v message=%q\n     conditions=%v\n", l.holder(), l.Phase,
			rel(l.TerminalAt, r.start), l.Events, l.Message, l.Conditions)
	}
	fmt.Fprintf(&b, "verdict: holders=%d/%d crowded=%d (%s) ", v.MostHolders, v.Permits, v.Crowded, v.LongestCrowded.Round(time.Millisecond))
	fmt.Fprintf(&b, "ranPastLease=%d (%s) ", v.RanPast, v.LongestPast.Round(time.Millisecond))
	fmt.Fprintf(&b, "overlaps=%d longest=%s staleAccepted=%d staleRejected=%d monotonic=%v %s terminalWithin=%s dup=%d %s\n",
		v.Overlaps, v.LongestOverlap.Round(time.Millisecond), v.StaleAccepted, v.StaleRejected, v.Monotonic, v.MonotonicNote,
		v.TerminalWithin.Round(time.Millisecond), v.DuplicateJobs, joinNonEmpty(v.Failures...))
	fmt.Print(b.String())
}
