//go:build fault

package fault

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// Why the queue model cannot follow a scenario's trace (scenario.untraced): its Redis keeps what it
// acknowledged, and it is one Redis.
const (
	lostData   = "Redis restarted empty: the model's Redis keeps what it acknowledged"
	movedRedis = "the lock moves to a Redis Cluster: the model is of one Redis"
	failedOver = "a Sentinel failover: the model is of one Redis that keeps what it acknowledged"
	// The previous release's operator runs the scripts of its own release, which the recording
	// cannot name (their sources are not this build's).
	olderRelease = "the previous release's scripts, which this build cannot name"
)

// The clusters a scenario's fault hits (scenario.disturbs).
var (
	onA  = []string{"a"}
	both = []string{"a", "b"}
)

// scenarios are run in this order. Those that need operator a on a fast
// leader lease (a successor must lead within seconds of a SIGKILL) come last,
// so the others run on the steady lease that a SIGSTOP or an API server
// outage cannot take away.
func scenarios() []scenario {
	return []scenario{
		{name: "baseline", run: baseline},
		{name: "semaphore-baseline", permits: semaphorePermits, run: semaphoreBaseline, verify: semaphoreFull},
		{name: "blackhole-a", disturbs: onA, run: proxyFault(lockedJobs, "a", func() { env.proxies["a"].Blackhole() })},
		{name: "reset-a", disturbs: onA, run: proxyFault(lockedJobs, "a", func() { env.proxies["a"].Reset() })},
		{name: "latency-both", disturbs: both, run: latency},
		{name: "redis-sigstop", disturbs: both, run: redisPause},
		{name: "redis-restart", untraced: lostData, overlapAllowed: true, run: redisRestart},
		{name: "job-deleted", run: jobDeleted(lockedJobs)},
		{name: "apiserver-a-down", disturbs: onA, run: apiserverDown},
		{name: "kcm-a-sigstop-pod-succeeds", run: jobControllerPaused},
		{name: "operator-a-sigstop", disturbs: onA, overlapAllowed: true, run: operatorPause(lockedJobs)},
		{name: "guarded-baseline", run: guardedBaseline, verify: heldThroughout},
		{name: "guarded-blackhole-a", disturbs: onA, run: proxyFault(guardedJobs, "a", func() { env.proxies["a"].Blackhole() })},
		{name: "guarded-job-deleted", run: jobDeleted(guardedJobs)},
		{name: "guarded-operator-a-sigstop", disturbs: onA, overlapAllowed: true, run: operatorPause(guardedJobs)},
		{name: "redis-clock-step", disturbs: both, overlapAllowed: true, run: clockStep(lockedJobs), verify: steppedClockOrdered},
		{name: "guarded-redis-clock-step", disturbs: both, overlapAllowed: true, run: clockStep(guardedJobs), verify: steppedClockOrdered},
		{name: "apiserver-a-slow", disturbs: onA, leaseA: fastLease, slowableA: true, run: apiserverSlow(false), verify: leadershipSurvived},
		{name: "apiserver-a-slow-job-ends", disturbs: onA, leaseA: fastLease, slowableA: true, run: apiserverSlow(true), verify: leadershipSurvived},
		{name: "operator-a-sigkill", disturbs: onA, overlapAllowed: true, leaseA: fastLease, run: operatorKill(lockedJobs)},
		{name: "semaphore-operator-a-sigkill", overlapAllowed: true, leaseA: fastLease, permits: semaphorePermits,
			run: semaphoreOperatorKill, verify: keptSlotOrLost},
		{name: "operator-a-restart-deleting", disturbs: onA, leaseA: fastLease, run: restartDuringDeletion(lockedJobs)},
		{name: "guarded-operator-a-sigkill", disturbs: onA, overlapAllowed: true, leaseA: fastLease, run: operatorKill(guardedJobs)},
		{name: "guarded-operator-a-restart-deleting", disturbs: onA, leaseA: fastLease, run: restartDuringDeletion(guardedJobs)},
		{name: "redis-reshard", untraced: movedRedis, run: redisReshard(lockedJobs), verify: keptThroughReshard},
		{name: "guarded-redis-reshard", untraced: movedRedis, run: redisReshard(guardedJobs), verify: keptThroughReshard},
		{name: "semaphore-redis-reshard", untraced: movedRedis, permits: semaphorePermits, run: redisReshard(semaphoreHolders), verify: keptSlotsThroughReshard},
		{name: "operator-a-upgrade", untraced: olderRelease, run: upgrade(lockedJobs), verify: survivedUpgrades(lockedJobs)},
		{name: "guarded-operator-a-upgrade", untraced: olderRelease, run: upgrade(guardedJobs), verify: survivedUpgrades(guardedJobs)},
		{name: "sentinel-split-brain", untraced: failedOver, overlapAllowed: true, splitBrain: true, run: sentinelSplitBrain(lockedJobs, false), verify: splitBrainShown(lockedJobs, false)},
		{name: "sentinel-split-brain-min-replicas", untraced: failedOver, overlapAllowed: true, run: sentinelSplitBrain(lockedJobs, true), verify: splitBrainShown(lockedJobs, true)},
		{name: "guarded-sentinel-split-brain", untraced: failedOver, overlapAllowed: true, splitBrain: true, run: sentinelSplitBrain(guardedJobs, false), verify: splitBrainShown(guardedJobs, false)},
		{name: "guarded-sentinel-split-brain-min-replicas", untraced: failedOver, overlapAllowed: true, run: sentinelSplitBrain(guardedJobs, true), verify: splitBrainShown(guardedJobs, true)},
		{name: "sentinel-failover", untraced: failedOver, overlapAllowed: true, run: sentinelFailover},
	}
}

// baseline: two LockedJobs per cluster on one lock, no fault. Everything must
// run one after the other with increasing fences.
func baseline(r *run) (time.Time, error) {
	for _, n := range []string{"a1", "a2"} {
		if err := r.create(env.clusters["a"], n, testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	for _, n := range []string{"b1", "b2"} {
		if err := r.create(env.clusters["b"], n, testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	return r.start, nil
}

// proxyFault cuts operator a's path to Redis (blackhole or reset) for longer
// than the ttl while the cast's holder holds the lock and its pod runs:
// operator a stays alive and Redis keeps its data, so the holder's pod must be
// stopped before its lease ends in Redis, i.e. before a waiter can run.
func proxyFault(k cast, cluster string, inject func()) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		if err := k.setUp(r, 8*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		inject()
		hold(pastTTL)
		env.proxies[cluster].Pass()
		return time.Now(), nil
	}
}

// latency: 150 ms each way (300 ms RTT) on both operators' paths, from
// before a1 acquires until its pod has finished, with ttl 3 s: Redis answers
// everyone, so no lock may be lost and nothing may overlap.
func latency(r *run) (time.Time, error) {
	for _, p := range env.proxies {
		p.Delay(150 * time.Millisecond)
	}
	if err := r.holderAndWaiter(5*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	hold(6 * time.Second)
	for _, p := range env.proxies {
		p.Pass()
	}
	return time.Now(), nil
}

// redisPause SIGSTOPs redis-server past the ttl while a1 holds: on SIGCONT
// the lease has ended and b1 may acquire at once, so operator a must have
// stopped a1's pod before the lease ended.
func redisPause(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(8*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	env.redis.Pause(r.t)
	hold(pastTTL)
	env.redis.Resume(r.t)
	return time.Now(), nil
}

// redisRestart restarts redis-server without persistence while a1 holds: the
// lock and the fence counter are gone, b1 acquires at once. Overlap is allowed
// (Redis lost data); fences must still rise.
func redisRestart(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(6*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	env.redis.Restart(r.t)
	return time.Now(), nil
}

// jobDeleted deletes the holder's Job out of band while its pod runs (kubectl
// delete job): the workload must not run a second time under the same fence,
// and no waiter may run beside its pod.
func jobDeleted(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		a := env.clusters["a"]
		if err := k.setUp(r, 5*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		name, err := k.holderJob(r)
		if err != nil {
			return time.Time{}, err
		}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}}
		if err := a.k8s.Delete(r.ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return time.Time{}, fmt.Errorf("delete Job %s: %w", job.Name, err)
		}
		return time.Now(), nil
	}
}

// apiserverDown kills cluster a's kube-apiserver for twice the ttl while a1
// holds, then starts it again. Operator a stays alive and keeps renewing, so
// nothing may overlap; a1's pod keeps running meanwhile, as a kubelet's would.
func apiserverDown(r *run) (time.Time, error) {
	a := env.clusters["a"]
	if err := r.holderAndWaiter(5*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	if err := a.killAPIServer(); err != nil {
		return time.Time{}, err
	}
	hold(2 * ttl)
	if err := a.restartAPIServer(); err != nil {
		return time.Time{}, err
	}
	if env.operators["a"].exited() {
		// Kept as a crash by the checker; overlaps then follow from it.
		r.allowOverlap = true
	}
	return time.Now(), nil
}

// jobControllerPaused SIGSTOPs cluster a's kube-controller-manager while a1's pod runs, so the pod
// succeeds with no Job controller to mark a1's Job Complete. The operator releases at the pod's
// outcome (reconcile.OutcomeSettled), so b1 runs meanwhile; the scenario fails if it does not, or
// if a1's Job is Complete by then (the release would not have come from the pod). Once resumed, the
// Job controller finishes a1's Job and must start no pod of it: the checker would see that pod run
// beside b1's.
func jobControllerPaused(r *run) (time.Time, error) {
	a, b := env.clusters["a"], env.clusters["b"]
	if err := r.holderAndWaiter(5*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	if err := a.pauseControllerManager(); err != nil {
		return time.Time{}, err
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = a.resumeControllerManager()
		}
	}()
	if err := r.waitRunning(b, "b1"); err != nil {
		return time.Time{}, fmt.Errorf("while cluster a's Job controller was stopped: %w", err)
	}
	job, err := lockedJobs.holderJob(r)
	if err != nil {
		return time.Time{}, err
	}
	j := &batchv1.Job{}
	if err := a.k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: job}, j); err != nil {
		return time.Time{}, fmt.Errorf("get Job %s: %w", job, err)
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return time.Time{}, fmt.Errorf("Job %s is %s although its controller was stopped: the release was not the pod's", job, c.Type)
		}
	}
	resumed = true
	if err := a.resumeControllerManager(); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// operatorPause SIGSTOPs operator a past the ttl while the holder holds and
// lets its pod complete meanwhile; after SIGCONT, the holder must not report
// Succeeded (a guarded Job: Released): a waiter took the lock during its run.
func operatorPause(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		if err := k.setUp(r, 5*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		o := env.operators["a"]
		if err := o.pause(); err != nil {
			return time.Time{}, err
		}
		hold(2 * ttl)
		if err := o.resume(); err != nil {
			return time.Time{}, err
		}
		return time.Now(), nil
	}
}

// operatorKill SIGKILLs operator a while the holder holds and starts it again
// at once (its successor leads once the 4 s leader lease ran out).
func operatorKill(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		if err := k.setUp(r, 6*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		return killAndRestart("a")
	}
}

// killAndRestart SIGKILLs the named operator and starts it again at once; it returns when the new
// process started (the fault healed).
func killAndRestart(name string) (time.Time, error) {
	o := env.operators[name]
	o.kill()
	if err := o.start(); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// restartDuringDeletion deletes the holder (the LockedJob, or the guarded Job)
// while its pod runs; the pod takes 8 s to terminate (well past the 3 s ttl),
// and operator a is restarted (SIGTERM, new process) meanwhile. The new
// operator must keep the lock until the pod is gone, so no waiter may run
// beside the terminating pod. A graceful restart is not a crash: the lock must
// survive it, so overlaps fail here.
func restartDuringDeletion(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		a := env.clusters["a"]
		if err := k.setUp(r, 20*time.Second, testkit.LockedJobOptions{Deleting: 8 * time.Second}); err != nil {
			return time.Time{}, err
		}
		deleted := k.holder(r)
		if err := a.k8s.Delete(r.ctx, deleted, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return time.Time{}, fmt.Errorf("delete %s: %w", deleted.GetName(), err)
		}
		// Restart once the operator has started the deletion (the pod terminates).
		if err := poll(30*time.Second, func() (bool, string) {
			return a.terminatingPods(r.ns) > 0, "no terminating pod of " + deleted.GetName()
		}); err != nil {
			return time.Time{}, err
		}
		if err := env.operators["a"].restart(fastLease); err != nil {
			return time.Time{}, err
		}
		return time.Now(), nil
	}
}

// sentinelMaster is the name the Sentinel scenario's sentinel monitors.
const sentinelMaster = "fault"

// sentinelFailover moves both operators to a Redis behind Sentinel (a master,
// a replica, one sentinel; real processes), SIGKILLs the master while a1 holds
// and waits until the sentinel promoted the replica. Replication is
// asynchronous, so the newest writes may be lost: overlaps are allowed, the
// fences must still rise. The operators reach Redis through the addresses
// Sentinel hands out, not through the fault proxies. It runs last: the
// operators stay on this Redis, which goes away with the scenario.
func sentinelFailover(r *run) (time.Time, error) {
	master := redisserver.Start(r.t)
	g, err := startSentinelGroup(r, master.Addr(), master.Addr())
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = g.sc.Close() }()
	for _, o := range env.operators {
		o.redisArgs = []string{"--redis-addrs", g.sentinel.Addr(), "--redis-sentinel-master", sentinelMaster}
		if err := o.restart(o.mode); err != nil {
			return time.Time{}, err
		}
	}
	if err := r.holderAndWaiter(6*time.Second, testkit.LockedJobOptions{}); err != nil {
		return time.Time{}, err
	}
	master.Kill(r.t)
	err = g.waitPromoted(r)
	return time.Now(), err
}

// sentinelGroup is a master's replica and one Sentinel (real processes), and a client of the
// Sentinel, which the caller closes.
type sentinelGroup struct {
	replica, sentinel *redisserver.Server
	sc                *redis.SentinelClient
}

// startSentinelGroup starts a replica of the master at replicaOf and a Sentinel that monitors it at
// monitorAt (one master, reached through the same address or through different proxies), and waits
// until the Sentinel sees the replica online.
func startSentinelGroup(r *run, replicaOf, monitorAt string) (*sentinelGroup, error) {
	host, port, _ := strings.Cut(replicaOf, ":")
	g := &sentinelGroup{
		replica:  redisserver.Start(r.t, redisserver.WithArgs("--replicaof", host, port)),
		sentinel: redisserver.Start(r.t, redisserver.WithSentinel(sentinelMaster, monitorAt)),
	}
	g.sc = redis.NewSentinelClient(&redis.Options{Addr: g.sentinel.Addr(), ContextTimeoutEnabled: true})
	err := poll(30*time.Second, func() (bool, string) {
		replicas, err := g.sc.Replicas(r.ctx, sentinelMaster).Result()
		return err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "disconnected"),
			fmt.Sprintf("sentinel does not see the replica online: %v %v", replicas, err)
	})
	if err != nil {
		_ = g.sc.Close()
		return nil, err
	}
	return g, nil
}

// waitPromoted waits until the Sentinel names the replica the master.
func (g *sentinelGroup) waitPromoted(r *run) error {
	return poll(30*time.Second, func() (bool, string) {
		addr, err := g.sc.GetMasterAddrByName(r.ctx, sentinelMaster).Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == g.replica.Addr(),
			fmt.Sprintf("sentinel has not promoted %s: %v %v", g.replica.Addr(), addr, err)
	})
}

// slowAPI is the latency added each way on operator a's path to its API server in
// apiserver-a-slow: a 4 s round trip, past the fast lease's 3 s renew deadline.
const slowAPI = 2 * time.Second

// apiserverSlow makes operator a's API server slow (slowAPI each way, through the proxy its
// kubeconfig names) while a1 holds the lock and b1 waits, until operator a has lost its leader
// lease, and 2 s more, so its next campaign starts against the slow server too. Redis is not
// touched: the lock book must renew a1's lock throughout, and the process, which no longer exits,
// must lead again and finish a1 under the same lease; then b1 runs.
//
// With jobEnds, a1's pod (9 s) completes while operator a does not lead: the fault is held until
// then, so no leader can see the end, and a1's lock must be renewed until the next leader
// releases it. Otherwise a1 (20 s) runs on well past the new election.
func apiserverSlow(jobEnds bool) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		a1Run := 20 * time.Second
		if jobEnds {
			a1Run = 9 * time.Second
		}
		if err := r.holderAndWaiter(a1Run, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		o, a := env.operators["a"], env.clusters["a"]
		r.faultAt = time.Now()
		a.apiProxy.Delay(slowAPI)
		if err := poll(60*time.Second, func() (bool, string) {
			return o.exited() || strings.Contains(o.logSince(r.marks["a"]), "leader election lost"),
				"operator a still leads through a slow API server"
		}); err != nil {
			return time.Time{}, err
		}
		logf("%s: operator a lost its leadership %s after the API server became slow", r.sc.name, since(r.faultAt))
		if jobEnds {
			if a.runningPods(r.ns, "a1") == 0 {
				return time.Time{}, errors.New("a1's pod ended before operator a lost its leadership: make it run longer")
			}
			if err := poll(30*time.Second, func() (bool, string) {
				return a.runningPods(r.ns, "a1") == 0, "a1's pod still runs"
			}); err != nil {
				return time.Time{}, err
			}
			logf("%s: a1's pod ended while operator a did not lead", r.sc.name)
		}
		hold(2 * time.Second)
		a.apiProxy.Pass()
		return time.Now(), nil
	}
}

// leadershipSurvived judges apiserver-a-slow: operator a lost its leadership and led again
// without exiting (a crash is a failure of check already); a1 kept one lease in Redis from before
// the fault until its pod had ended (and the fault had healed), so its lock was never lost; a1 and
// b1 both succeeded. It
// logs the time without a leader, the longest gap between renewals of a1's lease, and how soon
// the new leader re-observed a1.
func leadershipSurvived(r *run, h history) []string {
	var fails []string
	logs := env.operators["a"].logSince(r.marks["a"])
	stepped, led := logTime(logs, "Not leading: renewing held locks only"), time.Time{}
	if i := strings.Index(logs, "leader election lost"); i < 0 {
		fails = append(fails, "operator a never logged that it lost its leadership: the fault did not bite")
	} else {
		led = logTime(logs[i:], "Leading: acting on lock losses again")
	}
	if led.IsZero() {
		fails = append(fails, "operator a did not lead again after it lost its leadership")
	} else {
		elected := logs[strings.Index(logs, "Leading: acting on lock losses again"):]
		seen := logTime(elected, "Reconciling", `"name":"a1"`)
		logf("%s: operator a without leadership for %s (from its old manager's stop to its new manager's election); "+
			"a1 re-observed %s after the election", r.sc.name, led.Sub(stepped).Round(time.Millisecond),
			seen.Sub(led).Round(time.Millisecond))
	}
	if strings.Contains(logs, "Dropped a lock while not leading") {
		fails = append(fails, "operator a dropped a lock while it did not lead, although Redis answered")
	}
	fails = append(fails, unbrokenLease(r, h, holder("a", r.ns, "a1"))...)
	for _, l := range h.Claimants {
		if l.Phase != string(batchv1alpha1.PhaseSucceeded) {
			fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded", l.holder(), l.Phase, l.Message))
		}
	}
	return fails
}

// unbrokenLease judges that who kept one lease in Redis from before the fault until its pods had
// ended and the fault had healed: the lock was never lost, nor taken again. It logs the longest
// gap between renewals and how soon the lock passed on after the pods ended.
func unbrokenLease(r *run, h history, who string) []string {
	var podEnd time.Time
	for _, p := range h.Pods {
		if p.holder() == who {
			podEnd = maxTime(podEnd, p.End)
		}
	}
	ranUntil := maxTime(h.HealedAt, podEnd) // the lease must cover the fault and the whole run
	var leases []lease
	for _, l := range h.Leases {
		if l.Holder == who {
			leases = append(leases, l)
		}
	}
	if len(leases) != 1 {
		return []string{fmt.Sprintf("%s held %d leases in Redis, want one unbroken lease across the fault", who, len(leases))}
	}
	l := leases[0]
	if !l.Start.Before(r.faultAt) || (!l.End.IsZero() && l.End.Before(ranUntil)) {
		return []string{fmt.Sprintf("%s's lease (%s .. %s) does not cover the fault (from %s) and its pods (until %s)",
			who, rel(l.Start, r.start), rel(l.End, r.start), rel(r.faultAt, r.start), rel(ranUntil, r.start))}
	}
	logf("%s: %s's lease: longest gap between renewals %s, least time left %s", r.sc.name, who,
		l.LongestGap.Round(time.Millisecond), l.LeastLeft.Round(time.Millisecond))
	if !l.End.IsZero() {
		logf("%s: the lock passed on %s after %s's pods ended", r.sc.name, l.End.Sub(podEnd).Round(time.Millisecond), who)
	}
	return nil
}

// logTime is the time of the first line of logs that contains every one of what (zero if none):
// the operators log with --zap-time-encoding=rfc3339nano, the time first on the line.
func logTime(logs string, what ...string) time.Time {
	for line := range strings.SplitSeq(logs, "\n") {
		if !containsAll(line, what) {
			continue
		}
		stamp, _, _ := strings.Cut(line, "\t")
		t, err := time.Parse(time.RFC3339Nano, stamp)
		if err == nil {
			return t
		}
	}
	return time.Time{}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
