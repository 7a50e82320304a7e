//go:build fault

package fault

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// scenarios are run in this order. Those that need operator a on a fast
// leader lease (a successor must lead within seconds of a SIGKILL) come last,
// so the others run on the steady lease that a SIGSTOP or an API server
// outage cannot take away.
func scenarios() []scenario {
	return []scenario{
		{name: "baseline", run: baseline},
		{name: "blackhole-a", run: proxyFault("a", func() { env.proxies["a"].Blackhole() })},
		{name: "reset-a", run: proxyFault("a", func() { env.proxies["a"].Reset() })},
		{name: "latency-both", run: latency},
		{name: "redis-sigstop", run: redisPause},
		{name: "redis-restart", overlapAllowed: true, run: redisRestart},
		{name: "job-deleted", run: jobDeleted},
		{name: "apiserver-a-down", run: apiserverDown},
		{name: "operator-a-sigstop", overlapAllowed: true, run: operatorPause},
		{name: "operator-a-sigkill", overlapAllowed: true, leaseA: fastLease, run: operatorKill},
		{name: "operator-a-restart-deleting", leaseA: fastLease, run: restartDuringDeletion},
		{name: "sentinel-failover", overlapAllowed: true, run: sentinelFailover},
	}
}

// baseline: two LockedJobs per cluster on one lock, no fault. Everything must
// run one after the other with increasing fences.
func baseline(r *run) (time.Time, error) {
	for _, n := range []string{"a1", "a2"} {
		if err := r.create(env.clusters["a"], n, ljOpts{run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	for _, n := range []string{"b1", "b2"} {
		if err := r.create(env.clusters["b"], n, ljOpts{run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	return r.start, nil
}

// proxyFault cuts operator a's path to Redis (blackhole or reset) for longer
// than the ttl while a1 holds the lock and its pod runs: operator a stays
// alive and Redis keeps its data, so a1's pod must be stopped before its
// lease ends in Redis, i.e. before b1 can run.
func proxyFault(cluster string, inject func()) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		if err := r.holderAndWaiter(8*time.Second, ljOpts{}); err != nil {
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
	if err := r.holderAndWaiter(5*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	hold(6 * time.Second)
	for _, p := range env.proxies {
		p.Pass()
	}
	return time.Now(), nil
}

// redisPause SIGSTOPs redis-server past the ttl while a1 holds: on SIGCONT
// the lease has ended and b1 may obtain at once, so operator a must have
// stopped a1's pod before the lease ended.
func redisPause(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(8*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	env.redis.Pause(r.t)
	hold(pastTTL)
	env.redis.Resume(r.t)
	return time.Now(), nil
}

// redisRestart restarts redis-server without persistence while a1 holds: the
// lock and the fence counter are gone, b1 obtains at once. Overlap is allowed
// (Redis lost data); fences must still rise.
func redisRestart(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(6*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	env.redis.Restart(r.t)
	return time.Now(), nil
}

// jobDeleted deletes a1's Job out of band while its pod runs (kubectl delete
// job): the workload must not run a second time under the same fence.
func jobDeleted(r *run) (time.Time, error) {
	a := env.clusters["a"]
	if err := r.holderAndWaiter(5*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	lj := &batchv1alpha1.LockedJob{}
	if err := a.k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: "a1"}, lj); err != nil {
		return time.Time{}, err
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: lj.Status.JobName}}
	if err := a.k8s.Delete(r.ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return time.Time{}, fmt.Errorf("delete Job %s: %w", job.Name, err)
	}
	return time.Now(), nil
}

// apiserverDown kills cluster a's kube-apiserver for twice the ttl while a1
// holds, then starts it again. Operator a stays alive and keeps renewing, so
// nothing may overlap; a1's pod keeps running meanwhile, as a kubelet's would.
func apiserverDown(r *run) (time.Time, error) {
	a := env.clusters["a"]
	if err := r.holderAndWaiter(5*time.Second, ljOpts{}); err != nil {
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

// operatorPause SIGSTOPs operator a past the ttl while a1 holds and lets a1's
// pod complete meanwhile; after SIGCONT, a1 must not report Succeeded: b1
// took the lock during its run.
func operatorPause(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(5*time.Second, ljOpts{}); err != nil {
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

// operatorKill SIGKILLs operator a while a1 holds and starts it again at once
// (its successor leads once the 4 s leader lease ran out).
func operatorKill(r *run) (time.Time, error) {
	if err := r.holderAndWaiter(6*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	o := env.operators["a"]
	o.kill()
	if err := o.start(); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// restartDuringDeletion deletes a1 while its pod runs; the pod takes 8 s to
// terminate (well past the 3 s ttl), and operator a is restarted (SIGTERM,
// new process) meanwhile. The new operator must keep the lock until the pod is
// gone, so b1 may not run beside the terminating pod. A graceful restart is
// not a crash: the lock must survive it, so overlaps fail here.
func restartDuringDeletion(r *run) (time.Time, error) {
	a := env.clusters["a"]
	if err := r.holderAndWaiter(20*time.Second, ljOpts{deleting: 8 * time.Second}); err != nil {
		return time.Time{}, err
	}
	lj := &batchv1alpha1.LockedJob{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "a1"}}
	if err := a.k8s.Delete(r.ctx, lj); err != nil {
		return time.Time{}, err
	}
	// Restart once the operator has started the deletion (the pod terminates).
	if err := poll(30*time.Second, func() (bool, string) {
		return a.rec.terminatingPods(r.ns) > 0, "no terminating pod of a1"
	}); err != nil {
		return time.Time{}, err
	}
	if err := env.operators["a"].restart(fastLease); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
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
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redisserver.Start(r.t, redisserver.WithArgs("--replicaof", host, port))
	sentinel := redisserver.Start(r.t, redisserver.WithSentinel(sentinelMaster, master.Addr()))
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr(), ContextTimeoutEnabled: true})
	defer func() { _ = sc.Close() }()
	if err := poll(30*time.Second, func() (bool, string) {
		replicas, err := sc.Replicas(r.ctx, sentinelMaster).Result()
		return err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "disconnected"),
			fmt.Sprintf("sentinel does not see the replica online: %v %v", replicas, err)
	}); err != nil {
		return time.Time{}, err
	}
	for _, o := range env.operators {
		o.redisArgs = []string{"--redis-addrs", sentinel.Addr(), "--redis-sentinel-master", sentinelMaster}
		if err := o.restart(o.mode); err != nil {
			return time.Time{}, err
		}
	}
	if err := r.holderAndWaiter(6*time.Second, ljOpts{}); err != nil {
		return time.Time{}, err
	}
	master.Kill(r.t)
	err := poll(30*time.Second, func() (bool, string) {
		addr, err := sc.GetMasterAddrByName(r.ctx, sentinelMaster).Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr(),
			fmt.Sprintf("sentinel has not promoted %s: %v %v", replica.Addr(), addr, err)
	})
	return time.Now(), err
}
