package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// TestRedisCluster runs the library on a real three-master Redis Cluster. Every script touches
// several keys of one lock; they only work because those keys share the hash tag {key}, which keeps
// them in one slot (a cluster refuses multi-key commands across slots with CROSSSLOT).
func TestRedisCluster(t *testing.T) {
	srvs := redisserver.StartN(t, 3, redisserver.WithArgs("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"))
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	for _, s := range srvs {
		eventually(t, 20*time.Second, "cluster_state:ok on "+s.Addr(), func() bool {
			info, err := s.Client(t).ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	// Release marks on, as the operator's client has them: they are derived keys in the lock's slot.
	c, err := New(cc, WithKeyPrefix("lockedjob:"), WithReleaseMarkRetention(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	// Enough locks to land on every master.
	const n = 30
	locks := make([]*Lock, n)
	for i := range locks {
		locks[i] = mustAcquire(t, c, fmt.Sprintf("%s/%d", uniqueKey(t), i), 2*time.Second, WithMetadata("holder"))
	}
	slots := map[int64]bool{}
	for _, l := range locks {
		slot, err := cc.ClusterKeySlot(ctx, l.RedisKey()).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 3 {
		t.Fatalf("locks landed in only %d slots; the test needs them spread", len(slots))
	}

	// Renewal pipelines are split per node by the cluster client.
	var renewals, lost int
	done := make(chan struct{})
	k := c.NewKeeper(KeeperOptions{
		OnRenew: func(_ *Lock, err error) {
			if err == nil {
				renewals++
			}
			if renewals == 2*n {
				close(done)
			}
		},
		OnLost: func(*Lock, error) { lost++ },
	})
	for _, l := range locks {
		if err := k.Add(l, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d renewals after 10s, want %d", renewals, 2*n)
	}
	k.Stop()
	if lost != 0 {
		t.Fatalf("%d locks lost", lost)
	}

	// Queue, Inspect and Release are multi-key scripts too.
	key := locks[0].Key()
	if _, err := c.Acquire(ctx, key, time.Second, WithQueue("w", 0, time.Minute)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("queued Acquire of a held lock: %v", err)
	}
	if st, err := c.Inspect(ctx, key); err != nil || !st.Held || st.Metadata != "holder" {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %s: %v", l.Key(), err)
		}
	}
	if _, err := c.Acquire(ctx, key, time.Second, WithQueue("w", 0, time.Minute)); err != nil {
		t.Fatalf("queued Acquire of a free lock: %v", err)
	}
	// Each release left its mark on the master that owns its lock: asked again with the fence it
	// held, after another holder took that lock, a release finds it.
	if err := c.ReleaseToken(ctx, key, locks[0].Token(), locks[0].Fence()); err != nil {
		t.Fatalf("a release asked again on the cluster: %v, want nil (its mark)", err)
	}
	for _, l := range locks {
		if err := c.ReleaseToken(ctx, l.Key(), l.Token(), l.Fence()); err != nil {
			t.Fatalf("release of %s asked again: %v", l.Key(), err)
		}
	}

	clusterSemaphore(t, c)
}

// clusterSemaphore: a semaphore's scripts derive its slots' keys from the lock key (slots.lua);
// they share its hash tag, so the cluster node that owns the lock runs them all.
func clusterSemaphore(t *testing.T, c *Client) {
	ctx := context.Background()
	key := uniqueKey(t)
	declare(t, c, key, 3)
	var holders []*Lock
	for i, m := range []string{"a", "b", "c"} {
		l := mustAcquire(t, c, key, time.Minute, WithPermits(3), WithQueue(m, 0, time.Minute), WithMetadata(m))
		if l.Slot() != i {
			t.Fatalf("cluster semaphore: %s got slot %d, want %d", m, l.Slot(), i)
		}
		holders = append(holders, l)
	}
	mustQueue(t, c, key, "w", 1, 3, 1)
	if err := holders[2].Renew(ctx, time.Minute); err != nil {
		t.Fatalf("cluster semaphore: renew slot 2: %v", err)
	}
	if err := holders[1].Release(ctx); err != nil {
		t.Fatalf("cluster semaphore: release slot 1: %v", err)
	}
	wantHolders(t, c, key, "a", "w", "c")
	claim(t, c, key, "w", 1, 3, 1)
	if err := c.DequeueSlots(ctx, key, "nobody"); err != nil {
		t.Fatalf("cluster semaphore: DequeueSlots: %v", err)
	}
	// The scan asks every master; the others' keys are not this lock's.
	names, err := c.Semaphores(ctx)
	if err != nil || !slices.Contains(names, key) {
		t.Fatalf("cluster semaphore: Semaphores = %q, %v; want it to list %s", names, err, key)
	}
}
