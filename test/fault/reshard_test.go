//go:build fault

package fault

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// migrationPause is the time between two keys of the slot moving: renewals, queue calls and the
// waiter's retries meet the slot half-moved (ASK for a key already moved, TRYAGAIN for a script
// whose keys are split between the two masters).
const migrationPause = 400 * time.Millisecond

// redisReshard moves both operators to a Redis Cluster of three masters, then, while the cast's
// holder holds and its waiters wait, migrates the slot of the lock's keys to another master and
// back, key by key (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), as
// `redis-cli --cluster reshard` does. Redis keeps every key throughout, so nothing may be lost and
// nothing may overlap: the scripts must be retried on the redirections until the slot has moved.
// The operators go back to the suite's Redis once every claimant has ended. The suite's lease
// watcher reads the suite's Redis, so it sees no lease here: the checker falls back to the next
// holder's Job for the end of a lease, as for sentinel-failover.
func redisReshard(k cast) func(r *run) (time.Time, error) {
	return func(r *run) (time.Time, error) {
		cluster, err := startRedisCluster(r)
		if err != nil {
			return time.Time{}, err
		}
		defer func() { _ = cluster.Close() }()
		r.redis = cluster
		clusterArgs := []string{"--redis-mode", "cluster", "--redis-addrs", strings.Join(cluster.Options().Addrs, ",")}
		restore, err := moveOperators(r, map[string][]string{"a": clusterArgs, "b": clusterArgs})
		defer restore()
		if err != nil {
			return time.Time{}, err
		}
		if err := k.setUp(r, 12*time.Second, testkit.LockedJobOptions{}); err != nil {
			return time.Time{}, err
		}
		key, err := lockKeyOf(r, k)
		if err != nil {
			return time.Time{}, err
		}
		r.faultAt = time.Now()
		slot, err := cluster.ClusterKeySlot(r.ctx, key).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("CLUSTER KEYSLOT %s: %w", key, err)
		}
		from, to, err := slotOwnerAndAnother(r.ctx, cluster, slot)
		if err != nil {
			return time.Time{}, err
		}
		for _, move := range [][2]clusterNode{{from, to}, {to, from}} {
			n, err := migrateSlot(r.ctx, cluster, slot, move[0], move[1])
			if err != nil {
				return time.Time{}, err
			}
			logf("%s: moved slot %d (%d keys, the lock's among them) from %s to %s", r.sc.name, slot, n, move[0].addr, move[1].addr)
		}
		healed := time.Now()
		r.waitEnded(healed)
		return healed, nil
	}
}

// moveOperators restarts each operator named in args on those Redis flags, and returns what moves
// them all back to the suite's Redis (through their proxies). A scenario that moves them must call
// it only once nobody holds a lock on the other Redis (waitEnded), or their locks are lost.
func moveOperators(r *run, args map[string][]string) (restore func(), err error) {
	saved := map[string][]string{}
	restore = func() {
		for name, a := range saved {
			o := env.operators[name]
			o.redisArgs = a
			if err := o.restart(o.mode); err != nil {
				logf("%s: operator %s back on the suite's Redis: %v", r.sc.name, name, err)
			}
		}
	}
	for name, a := range args {
		o := env.operators[name]
		saved[name] = o.redisArgs
		o.redisArgs = a
		if err := o.restart(o.mode); err != nil {
			return restore, err
		}
	}
	return restore, nil
}

// waitEnded waits, after the fault healed, for what the runner waits for (every claimant terminal,
// their pods gone) and reports nothing: the checker does. A scenario whose lock lives on a Redis it
// started waits so before it takes that Redis away.
func (r *run) waitEnded(healed time.Time) {
	if err := poll(time.Until(healed.Add(terminalBound)), r.allTerminal); err != nil {
		logf("%s: %v", r.sc.name, err)
	}
	if err := poll(settleTimeout, func() (bool, string) { return r.settled(), "pods still running in " + r.ns }); err != nil {
		logf("%s: %v", r.sc.name, err)
	}
}

// startRedisCluster starts three masters, makes them one cluster and returns a client of it.
func startRedisCluster(r *run) (*redis.ClusterClient, error) {
	srvs := redisserver.StartN(r.t, 3, redisserver.WithArgs("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"))
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		err := poll(20*time.Second, func() (bool, string) {
			info, err := rdb.ClusterInfo(r.ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok"), "cluster_state not ok on " + s.Addr()
		})
		_ = rdb.Close()
		if err != nil {
			return nil, err
		}
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}), nil
}

// lockKeyOf is the Redis key of the cast's lock, as the holder's status (a LockedJob) or
// annotation (a guarded Job) names it.
func lockKeyOf(r *run, k cast) (string, error) {
	obj := k.holder(r)
	if err := env.clusters["a"].k8s.Get(r.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return "", err
	}
	key := obj.GetAnnotations()[batchv1alpha1.AnnotationGuardLockKey]
	if lj, ok := obj.(*batchv1alpha1.LockedJob); ok {
		key = lj.Status.LockKey
	}
	if key == "" {
		return "", fmt.Errorf("%s has no lock key yet", obj.GetName())
	}
	return key, nil
}

// clusterNode is one master: its address and cluster node ID.
type clusterNode struct{ addr, id string }

// slotOwnerAndAnother returns the master that serves slot and another master.
func slotOwnerAndAnother(ctx context.Context, cc *redis.ClusterClient, slot int64) (owner, other clusterNode, err error) {
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return owner, other, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	for _, sh := range shards {
		n, ok := masterOf(sh)
		if !ok {
			continue
		}
		serves := false
		for _, r := range sh.Slots {
			serves = serves || (r.Start <= slot && slot <= r.End)
		}
		if serves {
			owner = n
		} else if other.id == "" {
			other = n
		}
	}
	if owner.id == "" || other.id == "" {
		return owner, other, fmt.Errorf("slot %d: no owner or no other master in %+v", slot, shards)
	}
	return owner, other, nil
}

// masterOf is the master node of a shard.
func masterOf(sh redis.ClusterShard) (clusterNode, bool) {
	for _, n := range sh.Nodes {
		if n.Role == "master" {
			return clusterNode{addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), id: n.ID}, true
		}
	}
	return clusterNode{}, false
}

// migrateSlot moves slot from one master to another key by key, migrationPause apart, and returns
// how many keys moved.
func migrateSlot(ctx context.Context, cc *redis.ClusterClient, slot int64, from, to clusterNode) (int, error) {
	src, dst := redis.NewClient(&redis.Options{Addr: from.addr}), redis.NewClient(&redis.Options{Addr: to.addr})
	defer func() { _ = src.Close(); _ = dst.Close() }()
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT IMPORTING on %s: %w", to.addr, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.id).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT MIGRATING on %s: %w", from.addr, err)
	}
	host, port, _ := strings.Cut(to.addr, ":")
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 1).Result()
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT on %s: %w", from.addr, err)
		}
		if len(keys) == 0 {
			break
		}
		if err := src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", keys[0]).Err(); err != nil {
			return moved, fmt.Errorf("MIGRATE %s to %s: %w", keys[0], to.addr, err)
		}
		moved++
		hold(migrationPause)
	}
	// The new owner first, then every master, as redis-cli does.
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return moved, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err(); err != nil {
		return moved, fmt.Errorf("SETSLOT NODE on %s: %w", to.addr, err)
	}
	for _, sh := range shards {
		m, ok := masterOf(sh)
		if !ok {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: m.addr})
		err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err()
		_ = n.Close()
		if err != nil {
			return moved, fmt.Errorf("SETSLOT NODE on %s: %w", m.addr, err)
		}
	}
	return moved, nil
}

// keptThroughReshard judges redisReshard: every claimant ended as if nothing happened (no
// LockLost, no Lost), so no lock was lost while its slot moved.
func keptThroughReshard(_ *run, h history) []string {
	var fails []string
	for _, c := range h.Claimants {
		if !c.claimsUnbroken() {
			fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded or Released", c.holder(), c.Phase, c.Message))
		}
	}
	return fails
}
