package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/secretfile"
)

// redisMode is how the operator reaches Redis (--redis-mode).
type redisMode string

const (
	// redisSingle is one node, at --redis-addr.
	redisSingle redisMode = "single"
	// redisSentinel is the primary that the Sentinels at --redis-addrs name for
	// --redis-sentinel-master.
	redisSentinel redisMode = "sentinel"
	// redisCluster is a Redis Cluster whose seed nodes are --redis-addrs.
	redisCluster redisMode = "cluster"
	// redisRedlock is a majority of the independent nodes at --redis-addrs.
	redisRedlock redisMode = "redlock"
)

// redisModes lists the values --redis-mode takes, in the order its help names them.
var redisModes = []redisMode{redisSingle, redisSentinel, redisCluster, redisRedlock}

// redisModeOf decides the Redis mode from the flags: --redis-mode when given, else inferred as
// before the flag existed. Flags that belong to another mode, or that the mode would silently
// ignore, are refused rather than dropped: an operator that starts in another mode than its
// administrator meant takes its locks where the other replicas do not look.
func redisModeOf(o options) (redisMode, error) {
	mode, source, err := declaredOrInferredMode(o)
	if err != nil {
		return "", err
	}
	if err := checkModeFlags(mode, o); err != nil {
		return "", fmt.Errorf("%s: %w", source, err)
	}
	return mode, nil
}

// declaredOrInferredMode is --redis-mode, or the mode the other flags implied before it existed;
// source names where the mode came from, for error messages.
func declaredOrInferredMode(o options) (mode redisMode, source string, err error) {
	inferred := func(m redisMode, from string) (redisMode, string, error) {
		return m, fmt.Sprintf("Redis mode %s (inferred from %s, as --redis-mode is not set)", m, from), nil
	}
	switch {
	case o.redisMode != "":
		for _, m := range redisModes {
			if string(m) == o.redisMode {
				return m, "--redis-mode " + o.redisMode, nil
			}
		}
		return "", "", fmt.Errorf("--redis-mode %q: want one of %s", o.redisMode, modeNames())
	case o.redisSentinelMaster != "":
		return inferred(redisSentinel, "--redis-sentinel-master")
	case o.redisCluster:
		return inferred(redisCluster, "--redis-cluster")
	case len(splitList(o.redisAddrs)) > 0:
		return inferred(redisRedlock, "--redis-addrs")
	default:
		return inferred(redisSingle, "the absence of --redis-addrs")
	}
}

// checkModeFlags refuses the flags that contradict mode; each message names the flag to drop or
// to add.
func checkModeFlags(mode redisMode, o options) error {
	addrs := len(splitList(o.redisAddrs)) > 0
	rules := []struct {
		broken bool
		msg    string
	}{
		{mode == redisSingle && addrs, "takes its address from --redis-addr, not --redis-addrs"},
		{mode != redisSingle && !addrs, "needs --redis-addrs"},
		{mode == redisSentinel && o.redisSentinelMaster == "", "needs --redis-sentinel-master"},
		{mode != redisSentinel && o.redisSentinelMaster != "", "does not take --redis-sentinel-master (sentinel mode only)"},
		{mode != redisCluster && o.redisCluster, "contradicts --redis-cluster (a deprecated alias of --redis-mode cluster)"},
		{(mode == redisCluster || mode == redisRedlock) && o.redisDB != 0, "does not take --redis-db (single and sentinel modes only)"},
		{mode == redisCluster && o.waitReplicas > 0, "does not take --redis-wait-replicas (WAIT does not work across a Redis Cluster)"},
	}
	for _, r := range rules {
		if r.broken {
			return errors.New(r.msg)
		}
	}
	return nil
}

func modeNames() string {
	names := make([]string, len(redisModes))
	for i, m := range redisModes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// newLockClient builds the lock client over the go-redis clients of the chosen mode.
func newLockClient(o options) (*redislock.Client, error) {
	mode, err := redisModeOf(o)
	if err != nil {
		return nil, err
	}
	conn, err := redisConnOptions(o)
	if err != nil {
		return nil, err
	}
	opts := []redislock.Option{
		redislock.WithKeyPrefix(o.keyPrefix),
		redislock.WithReleaseNotifications(o.releaseChannel),
		redislock.WithNodeTimeout(o.redlockNodeTimeout),
		redislock.WithReleaseMarkRetention(lockbook.ReleaseMarkRetention),
	}
	if o.waitReplicas > 0 {
		opts = append(opts, redislock.WithWaitReplicas(o.waitReplicas, o.waitReplicasTimeout))
	}
	addrs := splitList(o.redisAddrs)
	switch mode {
	case redisSentinel:
		conn.Addrs, conn.MasterName = addrs, o.redisSentinelMaster
		return redislock.New(redis.NewFailoverClient(conn.Failover()), opts...)
	case redisCluster:
		conn.Addrs = addrs
		return redislock.New(redis.NewClusterClient(conn.Cluster()), opts...)
	case redisRedlock:
		nodes := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			conn.Addrs = []string{a}
			nodes[i] = redis.NewClient(conn.Simple())
		}
		c, err := redislock.NewRedlock(nodes, opts...)
		if err != nil {
			closeAll(nodes)
			return nil, fmt.Errorf("--redis-mode redlock, --redis-addrs: %w", err)
		}
		return c, nil
	default: // redisSingle
		conn.Addrs = []string{o.redisAddr}
		return redislock.New(redis.NewClient(conn.Simple()), opts...)
	}
}

// redisConnOptions are the connection settings every mode shares: credentials, TLS, database and
// the pool's behaviour.
func redisConnOptions(o options) (redis.UniversalOptions, error) {
	password, err := secretfile.Read(o.redisPasswordFile)
	if err != nil {
		return redis.UniversalOptions{}, fmt.Errorf("redis password: %w", err)
	}
	tlsConfig, err := redisTLSConfig(o)
	if err != nil {
		return redis.UniversalOptions{}, err
	}
	return redis.UniversalOptions{
		Username: o.redisUsername, Password: password, DB: o.redisDB, TLSConfig: tlsConfig,
		// Deadlines come from contexts (the keeper budgets rounds by the lease). No CLIENT
		// SETINFO: one round trip less on every new connection, whose handshake runs on its first
		// use, also for the spare ones MinIdleConns keeps; the keeper's renewals go through
		// go-redis's pipeline pool, which opens connections only when a round needs one, so the
		// smallest ttl counts that handshake (redislock.Client.MinTTL; a --redis-db other than 0
		// adds a SELECT to it).
		ContextTimeoutEnabled: true, MinIdleConns: 2, DisableIdentity: true,
	}, nil
}

// redisTLSConfig is nil without --redis-tls, else TLS 1.2 or later verified against
// --redis-tls-ca-file or the system roots.
func redisTLSConfig(o options) (*tls.Config, error) {
	if !o.redisTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.redisTLSCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(o.redisTLSCAFile)
	if err != nil {
		return nil, fmt.Errorf("redis CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("redis CA %s: no certificate found", o.redisTLSCAFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

func closeAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// checkEviction refuses a Redis that may evict lock keys under memory pressure: eviction deletes a
// held lock, and the next waiter takes it beside a running Job. A policy that cannot be read (ACL)
// or a Redis that does not answer yet is logged loudly, not fatal: the operator must start while
// Redis is briefly away.
func checkEviction(ctx context.Context, c *redislock.Client, allow bool) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.CheckEvictionPolicy(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redislock.ErrEvictionPolicy) && !allow:
		return fmt.Errorf("%w (set maxmemory-policy noeviction, or --allow-redis-eviction to run anyway)", err)
	default:
		setupLog.Error(err, "Could not confirm that Redis never evicts lock keys; an evicted lock can have two holders")
		return nil
	}
}

// warnUnreplicatedWrites warns when the Sentinel-managed primary accepts writes with no replica
// connected: cut off from its replicas and Sentinels while this operator still reaches it, it
// keeps renewing a holder's lock after a replica was promoted and handed the lock on (docs/fault.md,
// sentinel-split-brain). The README recommends min-replicas-to-write 1 and min-replicas-max-lag 1.
// A warning, not a refusal: the setting trades availability (a primary that lost its replicas
// refuses every write) for safety in a split brain, and that choice is the administrator's.
func warnUnreplicatedWrites(ctx context.Context, c *redislock.Client) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := c.CheckReplicaWrites(cctx)
	switch {
	case err == nil:
	case errors.Is(err, redislock.ErrUnreplicatedWrites):
		setupLog.Error(err, "The Redis primary accepts writes without replicas: in a Sentinel split brain a lock can have two holders; set min-replicas-to-write 1 and min-replicas-max-lag 1 on it (README, Running the operator)")
	default:
		setupLog.Error(err, "Could not read min-replicas-to-write of the Redis primary; without it a Sentinel split brain can give a lock two holders")
	}
}
