package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestRedisModeOf: flags in, Redis mode or refusal out. Without --redis-mode the mode is inferred
// as before the flag existed; flags that name another mode, or that the mode would ignore, are
// refused with a message that names them.
func TestRedisModeOf(t *testing.T) {
	three := "10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379"
	cases := map[string]struct {
		o       options
		want    redisMode
		wantErr string // every part must appear in the error
	}{
		// Inferred, as before --redis-mode.
		"nothing set: the one node at --redis-addr": {o: options{}, want: redisSingle},
		"--redis-addrs alone: redlock":              {o: options{redisAddrs: three}, want: redisRedlock},
		"--redis-addrs of blanks only: single":      {o: options{redisAddrs: " , "}, want: redisSingle},
		"--redis-sentinel-master: sentinel":         {o: options{redisAddrs: three, redisSentinelMaster: "m"}, want: redisSentinel},
		"--redis-cluster: cluster":                  {o: options{redisAddrs: three, redisCluster: true}, want: redisCluster},
		"--redis-db with single":                    {o: options{redisDB: 3}, want: redisSingle},
		"--redis-db with sentinel":                  {o: options{redisAddrs: three, redisSentinelMaster: "m", redisDB: 3}, want: redisSentinel},
		"--redis-wait-replicas with single":         {o: options{waitReplicas: 1}, want: redisSingle},
		"--redis-wait-replicas with sentinel":       {o: options{redisAddrs: three, redisSentinelMaster: "m", waitReplicas: 1}, want: redisSentinel},
		"--redis-wait-replicas with redlock":        {o: options{redisAddrs: three, waitReplicas: 1}, want: redisRedlock},

		// Declared.
		"single":                            {o: options{redisMode: "single"}, want: redisSingle},
		"sentinel":                          {o: options{redisMode: "sentinel", redisAddrs: three, redisSentinelMaster: "m"}, want: redisSentinel},
		"cluster":                           {o: options{redisMode: "cluster", redisAddrs: three}, want: redisCluster},
		"cluster with its deprecated alias": {o: options{redisMode: "cluster", redisAddrs: three, redisCluster: true}, want: redisCluster},
		"redlock":                           {o: options{redisMode: "redlock", redisAddrs: three}, want: redisRedlock},

		// Refused.
		"an unknown mode": {o: options{redisMode: "replicated"},
			wantErr: `--redis-mode "replicated": want one of single, sentinel, cluster, redlock`},
		"single with --redis-addrs": {o: options{redisMode: "single", redisAddrs: three},
			wantErr: "--redis-mode single: takes its address from --redis-addr, not --redis-addrs"},
		"single with --redis-sentinel-master": {o: options{redisMode: "single", redisSentinelMaster: "m"},
			wantErr: "--redis-mode single: does not take --redis-sentinel-master"},
		"single with --redis-cluster": {o: options{redisMode: "single", redisCluster: true},
			wantErr: "--redis-mode single: contradicts --redis-cluster"},
		"sentinel without --redis-sentinel-master": {o: options{redisMode: "sentinel", redisAddrs: three},
			wantErr: "--redis-mode sentinel: needs --redis-sentinel-master"},
		"sentinel without --redis-addrs": {o: options{redisMode: "sentinel", redisSentinelMaster: "m"},
			wantErr: "--redis-mode sentinel: needs --redis-addrs"},
		"inferred sentinel without --redis-addrs": {o: options{redisSentinelMaster: "m"},
			wantErr: "Redis mode sentinel (inferred from --redis-sentinel-master, as --redis-mode is not set): needs --redis-addrs"},
		"inferred sentinel with --redis-cluster": {o: options{redisAddrs: three, redisSentinelMaster: "m", redisCluster: true},
			wantErr: "Redis mode sentinel (inferred from --redis-sentinel-master, as --redis-mode is not set): contradicts --redis-cluster"},
		"cluster with --redis-sentinel-master": {o: options{redisMode: "cluster", redisAddrs: three, redisSentinelMaster: "m"},
			wantErr: "--redis-mode cluster: does not take --redis-sentinel-master"},
		"cluster without --redis-addrs": {o: options{redisMode: "cluster"},
			wantErr: "--redis-mode cluster: needs --redis-addrs"},
		"inferred cluster without --redis-addrs": {o: options{redisCluster: true},
			wantErr: "Redis mode cluster (inferred from --redis-cluster, as --redis-mode is not set): needs --redis-addrs"},
		"cluster with --redis-db": {o: options{redisMode: "cluster", redisAddrs: three, redisDB: 1},
			wantErr: "--redis-mode cluster: does not take --redis-db"},
		"inferred cluster with --redis-wait-replicas": {o: options{redisAddrs: three, redisCluster: true, waitReplicas: 1},
			wantErr: "Redis mode cluster (inferred from --redis-cluster, as --redis-mode is not set): does not take --redis-wait-replicas"},
		"redlock without --redis-addrs": {o: options{redisMode: "redlock"},
			wantErr: "--redis-mode redlock: needs --redis-addrs"},
		"redlock with --redis-sentinel-master": {o: options{redisMode: "redlock", redisAddrs: three, redisSentinelMaster: "m"},
			wantErr: "--redis-mode redlock: does not take --redis-sentinel-master"},
		"redlock with --redis-cluster": {o: options{redisMode: "redlock", redisAddrs: three, redisCluster: true},
			wantErr: "--redis-mode redlock: contradicts --redis-cluster"},
		"redlock with --redis-db": {o: options{redisAddrs: three, redisDB: 2},
			wantErr: "Redis mode redlock (inferred from --redis-addrs, as --redis-mode is not set): does not take --redis-db"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := redisModeOf(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("redisModeOf = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("redisModeOf = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestNewLockClientReachesTheModesNodes builds the lock client of each mode against real
// redis-servers and acquires a lock through it: the lock must land on the node(s) the mode names
// and nowhere else. Cluster mode needs a Redis Cluster, which the test harness does not start.
func TestNewLockClientReachesTheModesNodes(t *testing.T) {
	base := options{keyPrefix: "lockedjob:", releaseChannel: "lockedjob:released", redlockNodeTimeout: 50 * time.Millisecond}
	// bystander stands at --redis-addr in the modes that must not use it.
	bystander := redisserver.Start(t)
	base.redisAddr = bystander.Addr()

	t.Run("single", func(t *testing.T) {
		o := base
		o.redisMode = "single"
		acquireAndFind(t, o, []*redisserver.Server{bystander}, nil)
	})
	t.Run("sentinel", func(t *testing.T) {
		primary := redisserver.Start(t)
		sentinel := redisserver.Start(t, redisserver.WithSentinel("primary", primary.Addr()))
		o := base
		o.redisMode, o.redisAddrs, o.redisSentinelMaster = "sentinel", sentinel.Addr(), "primary"
		acquireAndFind(t, o, []*redisserver.Server{primary}, []*redisserver.Server{bystander})
	})
	t.Run("redlock, inferred", func(t *testing.T) {
		nodes := redisserver.StartN(t, 3)
		o := base
		o.redisAddrs = nodes[0].Addr() + "," + nodes[1].Addr() + "," + nodes[2].Addr()
		acquireAndFind(t, o, nodes, []*redisserver.Server{bystander})
	})
	t.Run("redlock over an even number of nodes is refused naming the flag", func(t *testing.T) {
		nodes := redisserver.StartN(t, 2)
		o := base
		o.redisMode, o.redisAddrs = "redlock", nodes[0].Addr()+","+nodes[1].Addr()
		c, err := newLockClient(o)
		if err == nil {
			t.Fatalf("newLockClient over 2 nodes = %d nodes, want a refusal", c.Nodes())
		}
		if want := "--redis-mode redlock, --redis-addrs: "; !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("newLockClient over 2 nodes: %v, want it to start with %q", err, want)
		}
	})
}

// acquireAndFind acquires a lock through the lock client of o and checks that its key is on every
// server of on and on no server of off.
func acquireAndFind(t *testing.T, o options, on, off []*redisserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := newLockClient(o)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Nodes(); got != len(on) {
		t.Fatalf("lock client over %d nodes, want %d", got, len(on))
	}
	lock := acquireWithin(ctx, t, c, "mode-test")
	key := c.RedisKey("mode-test")
	for _, s := range on {
		if n, err := s.Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("key %s on %s: exists = %d, %v; want 1", key, s.Addr(), n, err)
		}
	}
	for _, s := range off {
		if n, err := s.Client(t).Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("key %s on %s, which the mode must not use: exists = %d, %v; want 0", key, s.Addr(), n, err)
		}
	}
	// The release leaves its mark on a single deployment (the operator's releases must, so a
	// restart can tell its own release from a loss), and none on Redlock.
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantMarks := map[bool]int{true: 1, false: 0}[len(on) == 1]
	marks := 0
	for _, s := range on {
		for _, k := range s.Client(t).Keys(ctx, key+"*").Val() {
			if lockbook.IsReleaseMark(k) {
				marks++
			}
		}
	}
	if marks != wantMarks {
		t.Errorf("%d release marks after the release, want %d", marks, wantMarks)
	}
}

// acquireWithin acquires key, retrying while a Sentinel has not yet learnt its primary.
func acquireWithin(ctx context.Context, t *testing.T, c *redislock.Client, key string) *redislock.Lock {
	t.Helper()
	for {
		lock, err := c.Acquire(ctx, key, 10*time.Second)
		if err == nil {
			return lock
		}
		select {
		case <-ctx.Done():
			t.Fatalf("acquire %s: %v", key, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
