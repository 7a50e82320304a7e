//go:build fault

package fault

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// cast is who contends in a scenario of the usual shape: a holder in cluster a, which the fault
// hits, and its waiters in cluster b. The faults are written once (faults_test.go) and played by
// either cast, so a guarded Job meets every fault a LockedJob meets there, on the same timers.
type cast struct {
	// setUp creates the holder (its pod runs for holderRun, shaped by o) and waits until it runs,
	// then creates the waiters and waits until they wait.
	setUp func(r *run, holderRun time.Duration, o testkit.LockedJobOptions) error
	// holderJob names the holder's Job, for a deletion out of band.
	holderJob func(r *run) (string, error)
	// holder is what a user deletes to stop the holder: the LockedJob, or the guarded Job itself.
	holder func(r *run) client.Object
	// claimant is the holder's name in the history (holder(cluster a, namespace, claimant)).
	claimant string
	// guarded: the holder is a guarded Job, which ends Released or Lost, not Succeeded or LockLost.
	guarded bool
}

// ended and lost are the holder's outcomes in the history: its lock kept to the end, or lost.
func (k cast) ended() string {
	if k.guarded {
		return guardReleased
	}
	return phaseSucceeded
}

func (k cast) lost() string {
	if k.guarded {
		return string(batchv1alpha1.GuardLost)
	}
	return string(batchv1alpha1.PhaseLockLost)
}

// lockedJobs: a1 (LockedJob) in a holds; b1 (LockedJob) in b waits.
var lockedJobs = cast{
	setUp: (*run).holderAndWaiter,
	holderJob: func(r *run) (string, error) {
		lj := &batchv1alpha1.LockedJob{}
		if err := env.clusters["a"].k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: "a1"}, lj); err != nil {
			return "", err
		}
		return lj.Status.JobName, nil
	},
	holder: func(r *run) client.Object {
		return &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "a1"}}
	},
	claimant: "a1",
}

// guardedJobs: ga1 (a guarded Job) in a holds; b1 (a LockedJob, which retries every 250 ms and so
// takes a lease the moment it ends) and gb1 (a guarded Job) in b wait, the guarded waiter behind
// the LockedJob in the one queue they share.
var guardedJobs = cast{
	setUp:     (*run).guardedHolderAndWaiters,
	holderJob: func(*run) (string, error) { return "ga1", nil },
	holder: func(r *run) client.Object {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "ga1"}}
	},
	claimant: guardedClaimant("ga1"),
	guarded:  true,
}

// createGuarded creates a guarded Job in cluster c on the scenario's lock, of scope Cluster so both
// clusters' claimants contend for it; o.TTL defaults to ttl. The Job must come back suspended: the
// admission gate is in force.
func (r *run) createGuarded(c *cluster, name string, o testkit.LockedJobOptions) error {
	o.Lock, o.Scope, o.TTL, o.App = r.lock, batchv1alpha1.LockScopeCluster, cmp.Or(o.TTL, ttl), "fault"
	job := testkit.NewGuardedJob(r.ns, name, o)
	if err := c.k8s.Create(r.ctx, job); err != nil {
		return fmt.Errorf("create guarded Job %s in %s: %w", name, c.name, err)
	}
	r.mu.Lock()
	r.guarded = append(r.guarded, holder(c.name, r.ns, guardedClaimant(name)))
	r.mu.Unlock()
	if job.Spec.Suspend == nil || !*job.Spec.Suspend {
		return fmt.Errorf("guarded Job %s in %s was created running: the admission gate is not in force", name, c.name)
	}
	return nil
}

// waitQueued waits until the guarded Job named name in cluster c waits in the lock's queue in
// Redis: a guarded waiter writes nothing on its Job.
func (r *run) waitQueued(c *cluster, name string) error {
	want := holder(c.name, r.ns, guardedClaimant(name))
	return poll(60*time.Second, func() (bool, string) {
		queued, err := queuedHolders(r.ctx, r.lockRedis(), r.lock)
		return err == nil && slices.Contains(queued, want), fmt.Sprintf("%s not in the queue of %s: %v %v", want, r.lock, queued, err)
	})
}

// guardedHolderAndWaiters is guardedJobs' set-up: ga1 in a holds and its pod runs for holderRun;
// then b1 (LockedJob, 2 s) and gb1 (guarded, 2 s) in b wait for it.
func (r *run) guardedHolderAndWaiters(holderRun time.Duration, o testkit.LockedJobOptions) error {
	a, b := env.clusters["a"], env.clusters["b"]
	o.Run = holderRun
	if err := r.createGuarded(a, "ga1", o); err != nil {
		return err
	}
	if err := r.waitRunning(a, guardedClaimant("ga1")); err != nil {
		return err
	}
	if err := r.create(b, "b1", testkit.LockedJobOptions{Run: 2 * time.Second, TTL: o.TTL}); err != nil {
		return err
	}
	if err := r.waitWaiting(b, "b1"); err != nil {
		return err
	}
	if err := r.createGuarded(b, "gb1", testkit.LockedJobOptions{Run: 2 * time.Second, TTL: o.TTL}); err != nil {
		return err
	}
	return r.waitQueued(b, "gb1")
}

// guardedBaseline: a guarded Job and a LockedJob per cluster on one lock, no fault, created
// together. They must run one after the other with rising fences, across kinds and clusters.
func guardedBaseline(r *run) (time.Time, error) {
	for _, c := range []*cluster{env.clusters["a"], env.clusters["b"]} {
		if err := r.createGuarded(c, "g"+c.name+"1", testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
		if err := r.create(c, c.name+"1", testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	return r.start, nil
}

// heldThroughout judges a scenario without a fault: every claimant, of either kind, ran once under
// its lock and says so (a LockedJob Succeeded, a guarded Job Released), and every one of them held
// (a Job under a fence), so the baseline cannot pass with a kind that never ran.
func heldThroughout(r *run, h history) []string {
	var fails []string
	held := map[string]bool{}
	for _, j := range h.Jobs {
		held[j.holder()] = true
	}
	for _, c := range h.Claimants {
		if !c.claimsUnbroken() {
			fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded or Released", c.holder(), c.Phase, c.Message))
		}
		if !held[c.holder()] {
			fails = append(fails, c.holder()+" never held the lock")
		}
	}
	if len(h.Claimants) != 4 || len(r.guarded) != 2 {
		fails = append(fails, fmt.Sprintf("%d claimants recorded, %d of them guarded Jobs; want guardedBaseline's 4 and 2",
			len(h.Claimants), len(r.guarded)))
	}
	return fails
}
