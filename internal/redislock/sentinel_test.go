package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestSentinelFailoverKeepsAReplicatedLock runs the library through Redis Sentinel (a master, a
// replica and a sentinel, all real processes) and kills the master. A lock acquired with
// WithWaitReplicas(1) was acknowledged by the replica, so after the sentinel promotes it the holder
// still holds the lock: its renew succeeds and never reports ErrLockLost.
func TestSentinelFailoverKeepsAReplicatedLock(t *testing.T) {
	master := redisserver.Start(t)
	host, port, _ := strings.Cut(master.Addr(), ":")
	replica := redisserver.Start(t, redisserver.WithArgs("--replicaof", host, port))
	sentinel := redisserver.Start(t, redisserver.WithSentinel("lockmaster", master.Addr()))
	ctx := context.Background()

	mc := master.Client(t)
	eventually(t, 20*time.Second, "the replica to sync", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = sc.Close() })
	eventually(t, 20*time.Second, "the sentinel to see the replica online", func() bool {
		replicas, err := sc.Replicas(ctx, "lockmaster").Result()
		return err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "disconnected")
	})

	fc := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: []string{sentinel.Addr()}, MasterName: "lockmaster", ContextTimeoutEnabled: true,
		// The read timeout must outlast WAIT's own timeout below.
		DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = fc.Close() })
	c, err := New(fc, WithWaitReplicas(1, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	l := mustAcquire(t, c, key, time.Minute, WithMetadata("survivor"))

	master.Kill(t)
	eventually(t, 30*time.Second, "the sentinel to promote the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, "lockmaster").Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr()
	})
	eventually(t, 30*time.Second, "a renew on the new master", func() bool {
		err := l.Renew(ctx, 0)
		if errors.Is(err, ErrLockLost) {
			t.Fatalf("the replicated lock was lost in the failover: %v", err)
		}
		return err == nil
	})
	st, err := c.Inspect(ctx, key)
	if err != nil || !st.Held || st.Metadata != "survivor" || st.Fence != l.Fence() {
		t.Fatalf("after failover: %+v, %v", st, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release on the new master: %v", err)
	}
}
