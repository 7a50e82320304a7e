//go:build fault

package fault

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// splitBrainHolderRun is how long a1's pod runs: long past the failover and the ttl, so a1 still
// runs when b1 acquires on the promoted replica.
const splitBrainHolderRun = 12 * time.Second

// sentinelSplitBrain isolates a Sentinel-managed master from its replica and its Sentinel while
// operator a still reaches it, as a partition that leaves the old master on a's side does:
//
//   - the replica replicates from the master through one proxy, the Sentinel (and operator b, which
//     finds the master through the Sentinel) reaches it through another; both are blackholed while
//     a1 holds and b1 waits;
//   - operator a talks to the master directly (one node: it never hears of the failover, as a
//     client that cannot reach the Sentinels does not), and keeps renewing a1 there;
//   - the Sentinel promotes the replica, where a1's key, no longer renewed, expires: b1 acquires.
//
// The cast's holder (a1, or the guarded Job ga1) and waiters (b1, and gb1 behind it) play the parts
// named a1 and b1 here. Without a mitigation the two run side by side until a1's run ends: Redis's replication is
// asynchronous and the old master accepts writes it can never replicate. With minReplicas the
// master runs with min-replicas-to-write 1 and min-replicas-max-lag 1: once its replica's
// acknowledgements stop it refuses the renewals, and operator a stops a1 at risk. Overlap is
// allowed in both (an assumption is dropped); the fence must order them.
func sentinelSplitBrain(k cast, minReplicas bool) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		var masterArgs []string
		if minReplicas {
			masterArgs = []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}
		}
		master := redisserver.Start(r.t, redisserver.WithArgs(masterArgs...))
		// Where the set-up sees the waiters queue: the master both operators use until the partition.
		r.redis = master.Client(r.t)
		toReplica, err := faultproxy.Start(master.Addr())
		if err != nil {
			return time.Time{}, err
		}
		defer func() { _ = toReplica.Close() }()
		toSentinel, err := faultproxy.Start(master.Addr())
		if err != nil {
			return time.Time{}, err
		}
		defer func() { _ = toSentinel.Close() }()
		g, err := startSentinelGroup(r, toReplica.Addr(), toSentinel.Addr())
		if err != nil {
			return time.Time{}, err
		}
		defer func() { _ = g.sc.Close() }()
		restore, err := moveOperators(r, map[string][]string{
			"a": {"--redis-addr", master.Addr()},
			"b": {"--redis-addrs", g.sentinel.Addr(), "--redis-sentinel-master", sentinelMaster},
		})
		defer restore()
		if err != nil {
			return time.Time{}, err
		}
		if err := warnedOfUnreplicatedWrites(env.operators["b"], !minReplicas); err != nil {
			return time.Time{}, err
		}
		if err := k.setUp(r, splitBrainHolderRun, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		r.faultAt = time.Now()
		toReplica.Blackhole()
		toSentinel.Blackhole()
		if err := g.waitPromoted(r); err != nil {
			return time.Time{}, err
		}
		logf("%s: the Sentinel promoted the replica %s after the partition", r.sc.name, since(r.faultAt))
		// The partition stays until the end: the old master never learns it was replaced.
		healed := time.Now()
		r.waitEnded(healed)
		return healed, nil
	}
}

// unreplicatedWritesWarning is what an operator in Sentinel mode logs at start-up when the
// primary accepts writes without replicas (cmd/manager, warnUnreplicatedWrites).
const unreplicatedWritesWarning = "accepts writes without replicas"

// warnedOfUnreplicatedWrites checks that o's latest process, started in Sentinel mode and ready,
// warned of the primary's missing min-replicas-to-write if and only if want.
func warnedOfUnreplicatedWrites(o *operator, want bool) error {
	o.mu.Lock()
	path := o.proc.LogPath
	o.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if got := strings.Contains(string(b), unreplicatedWritesWarning); got != want {
		return fmt.Errorf("operator in Sentinel mode: logged %q: %t, want %t (%s)", unreplicatedWritesWarning, got, want, path)
	}
	return nil
}

// splitBrainShown judges sentinelSplitBrain: b1 came under the lock on the promoted replica while
// the partition held. Unmitigated, a1 must have run beside it (the split brain the mitigation is
// for; if it did not, the scenario did not bite) and ended Succeeded (Released) although b1 acquired during
// its run, as the old master kept accepting its renewals: the limit the checker reports for this
// scenario instead of failing it (history.SplitBrain), shown here so it cannot pass unseen. With
// minReplicas, a1 must have ended LockLost (a guarded holder: Lost): the master refused its
// renewals. Either way it logs how long the two ran side by side.
func splitBrainShown(k cast, minReplicas bool) func(r *run, h history) []string {
	return func(r *run, h history) []string {
		var fails []string
		a1, b1 := holder("a", r.ns, k.claimant), holder("b", r.ns, "b1")
		var overlap time.Duration
		for _, p := range h.Pods {
			for _, q := range h.Pods {
				if p.holder() == a1 && q.holder() == b1 && p.End.After(q.Start) && q.End.After(p.Start) {
					overlap = max(overlap, minTime(p.End, q.End).Sub(maxTime(p.Start, q.Start)))
				}
			}
		}
		phase := map[string]string{}
		for _, c := range h.Claimants {
			phase[c.holder()] = c.Phase
		}
		switch {
		case phase[b1] != phaseSucceeded:
			fails = append(fails, fmt.Sprintf("b1 ended %s, want Succeeded on the promoted replica", phase[b1]))
		case !minReplicas && overlap == 0:
			fails = append(fails, fmt.Sprintf("%s and b1 never ran side by side: the split brain did not happen", k.claimant))
		case !minReplicas && phase[a1] != k.ended():
			fails = append(fails, fmt.Sprintf("%s ended %s; the old master should have kept renewing it (%s)", k.claimant, phase[a1], k.ended()))
		case !minReplicas && !slices.ContainsFunc(succeededThoughTaken(h), func(e string) bool { return strings.HasPrefix(e, a1+" ") }):
			fails = append(fails, fmt.Sprintf("%s's claim of success was not seen as taken: the checker's rule did not apply", k.claimant))
		case minReplicas && phase[a1] != k.lost():
			fails = append(fails, fmt.Sprintf("%s ended %s, want %s: the master should refuse its renewals", k.claimant, phase[a1], k.lost()))
		}
		logf("%s: %s ended %s, b1 %s; they ran side by side for %s", r.sc.name, k.claimant, phase[a1], phase[b1], overlap.Round(time.Millisecond))
		return fails
	}
}
