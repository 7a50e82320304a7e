package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// keysLeft counts the lock and metadata keys of key on the running servers.
func keysLeft(t *testing.T, c *Client, srvs []*redisserver.Server, key string) int {
	t.Helper()
	total := 0
	for _, s := range srvs {
		if !s.Running() {
			continue
		}
		n, err := s.Client(t).Exists(context.Background(), c.RedisKey(key), c.RedisKey(key)+":meta").Result()
		if err != nil {
			t.Fatalf("%s: %v", s.Addr(), err)
		}
		total += int(n)
	}
	return total
}

func TestRedlock(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			t.Run("minority down still acquires, renews and releases", func(t *testing.T) {
				c, srvs := redlock(t, n)
				for _, s := range srvs[:n/2] {
					s.Kill(t)
				}
				ctx := context.Background()
				key := uniqueKey(t)
				l := mustAcquire(t, c, key, 10*time.Second)
				if err := l.Renew(ctx, 0); err != nil {
					t.Fatalf("Renew: %v", err)
				}
				if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
					t.Fatalf("TTL: %v %v", ttl, err)
				}
				if _, err := c.Acquire(ctx, key, time.Second); !errors.Is(err, ErrNotAcquired) {
					t.Fatalf("second Acquire: %v, want ErrNotAcquired", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if left := keysLeft(t, c, srvs, key); left != 0 {
					t.Fatalf("%d keys left after release", left)
				}
			})

			t.Run("majority down fails and leaves no key behind", func(t *testing.T) {
				c, srvs := redlock(t, n)
				for _, s := range srvs[:n/2+1] {
					s.Kill(t)
				}
				key := uniqueKey(t)
				_, err := c.Acquire(context.Background(), key, 10*time.Second)
				var ne *NodeError
				if err == nil || errors.Is(err, ErrNotAcquired) || !errors.As(err, &ne) {
					t.Fatalf("got %v, want an unavailability error with node errors", err)
				}
				if left := keysLeft(t, c, srvs, key); left != 0 {
					t.Fatalf("%d keys left on the live minority", left)
				}
			})

			t.Run("a paused node does not block past the node timeout", func(t *testing.T) {
				const nodeTimeout = 100 * time.Millisecond
				c, srvs := redlock(t, n, WithNodeTimeout(nodeTimeout))
				srvs[0].Pause(t)
				defer srvs[0].Resume(t)
				ctx := context.Background()
				start := time.Now()
				l, err := c.Acquire(ctx, uniqueKey(t), 10*time.Second)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("Acquire with one paused node: %v", err)
				}
				// Acquire makes at most two fan-outs (acquire, and the fence write-back when the nodes
				// disagree); each waits at most 1.5 node timeouts.
				if limit := 3*nodeTimeout + 200*time.Millisecond; took > limit {
					t.Fatalf("Acquire took %v with a paused node, want under %v", took, limit)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
			})

			t.Run("contenders never overlap and fences increase", func(t *testing.T) {
				// What is checked is exclusion and fence order, not the node timeout: with the
				// default 50 ms, a slow first connection (16 contenders dialling 5 nodes under the
				// race detector on 2 cores) counts as a node down, which is no exclusion problem.
				c, _ := redlock(t, n, WithNodeTimeout(time.Second))
				key := uniqueKey(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var mu sync.Mutex
				var last int64
				inside := 0
				var problems []string
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for range 3 {
							l, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
							if err != nil {
								mu.Lock()
								problems = append(problems, err.Error())
								mu.Unlock()
								return
							}
							mu.Lock()
							inside++
							if inside != 1 || l.Fence() <= last {
								problems = append(problems, fmt.Sprintf("inside=%d fence %d after %d", inside, l.Fence(), last))
							}
							last = l.Fence()
							inside--
							mu.Unlock()
							if err := l.Release(ctx); err != nil {
								mu.Lock()
								problems = append(problems, err.Error())
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				if len(problems) > 0 {
					t.Fatalf("%d problems, first: %s", len(problems), problems[0])
				}
			})
		})
	}
}

// TestRedlockFenceSurvivesDivergentCounters: nodes whose counters disagree (one far ahead, as after
// a partition) still yield strictly increasing tokens across holders whose quorums differ. Each
// holder is a client of its own, as in separate processes: one client's proposals learn how far
// ahead the nodes run (see TestRedlockFenceProposal), and must not be what keeps the order.
func TestRedlockFenceSurvivesDivergentCounters(t *testing.T) {
	c, srvs := redlock(t, 3)
	ctx := context.Background()
	key := uniqueKey(t)
	fenceKey := c.RedisKey(key) + ":fence"
	far := time.Now().Add(24 * time.Hour).UnixMicro() // a counter well ahead of every clock
	if err := srvs[2].Client(t).Set(ctx, fenceKey, far, 0).Err(); err != nil {
		t.Fatal(err)
	}

	var last int64
	// Holder 1 gets a quorum including the node that is ahead; holder 2's quorum excludes it.
	for round, down := range []int{0, 2, 1, 2} {
		srvs[down].Pause(t)
		l := mustAcquire(t, redlockOn(t, srvs), key, 5*time.Second)
		srvs[down].Resume(t)
		if l.Fence() <= last {
			t.Fatalf("round %d (node %d paused): fence %d after %d", round, down, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d release: %v", round, err)
		}
	}
	if last <= far {
		t.Fatalf("last fence %d never passed the far counter %d", last, far)
	}
}

// TestRedlockFenceProposal: nodes that hand out the token the client proposed keep it, so a grant
// costs one script per node; a node whose counter is ahead makes the client write the highest token
// back to a quorum, after which its proposals are ahead of that node too.
func TestRedlockFenceProposal(t *testing.T) {
	c, srvs := redlock(t, 3)
	ctx := context.Background()
	key := uniqueKey(t)
	fenceKey := c.RedisKey(key) + ":fence"
	// scriptsPerNode acquires key and returns the lock and the scripts each node ran for it.
	scriptsPerNode := func() (*Lock, []int64) {
		t.Helper()
		before := make([]int64, len(srvs))
		for i, s := range srvs {
			before[i] = evalCalls(t, s.Client(t))
		}
		l := mustAcquire(t, c, key, 5*time.Second)
		ran := make([]int64, len(srvs))
		for i, s := range srvs {
			ran[i] = evalCalls(t, s.Client(t)) - before[i]
		}
		return l, ran
	}
	// keeping counts the nodes whose counter is at least fence: a quorum must be.
	keeping := func(fence int64) int {
		t.Helper()
		n := 0
		for _, s := range srvs {
			v, err := s.Client(t).Get(ctx, fenceKey).Int64()
			if err != nil {
				t.Fatalf("%s: %v", s.Addr(), err)
			}
			if v >= fence {
				n++
			}
		}
		return n
	}
	release := func(l *Lock) {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	release(mustAcquire(t, c, key, 5*time.Second)) // every node loads the scripts

	l, ran := scriptsPerNode()
	if !slices.Equal(ran, []int64{1, 1, 1}) {
		t.Fatalf("scripts per node for an agreed grant: %v, want one each", ran)
	}
	if n := keeping(l.Fence()); n != 3 {
		t.Fatalf("%d of 3 nodes keep the agreed fence %d", n, l.Fence())
	}
	release(l)

	// One node's counter far ahead of every clock, as after a partition: its token is the highest.
	far := time.Now().Add(time.Hour).UnixMicro()
	if err := srvs[1].Client(t).Set(ctx, fenceKey, far, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, ran = scriptsPerNode()
	if l.Fence() <= far {
		t.Fatalf("fence %d, want above the far counter %d", l.Fence(), far)
	}
	if !slices.Equal(ran, []int64{2, 2, 2}) {
		t.Fatalf("scripts per node when one node is ahead: %v, want the grant and the write-back on each", ran)
	}
	if n := keeping(l.Fence()); n < 2 {
		t.Fatalf("%d of 3 nodes keep the fence %d, want a quorum", n, l.Fence())
	}
	last := l.Fence()
	release(l)

	l, ran = scriptsPerNode()
	if l.Fence() <= last {
		t.Fatalf("fence %d after %d", l.Fence(), last)
	}
	if !slices.Equal(ran, []int64{1, 1, 1}) {
		t.Fatalf("scripts per node after the lead was learnt: %v, want one each", ran)
	}
	release(l)
}

func TestRedlockKeeper(t *testing.T) {
	c, srvs := redlock(t, 3)
	l := mustAcquire(t, c, uniqueKey(t), time.Second)
	rec := newLostRecorder()
	var killed atomic.Bool
	var renewedAfterKill atomic.Int64
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: func(_ *Lock, err error) {
		if err == nil && killed.Load() {
			renewedAfterKill.Add(1)
		}
	}})
	defer k.Stop()
	if err := k.Add(l, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srvs[0].Kill(t) // a minority down: renewals go on
	killed.Store(true)
	eventually(t, 5*time.Second, "renewals on the remaining majority", func() bool { return renewedAfterKill.Load() >= 2 })

	// Take the lock away on one of the two remaining nodes: no quorum can renew it any more.
	if err := srvs[1].Client(t).Del(context.Background(), l.RedisKey()).Err(); err != nil {
		t.Fatal(err)
	}
	got, _, err := rec.wait(t, 5*time.Second)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v with %v, want our lock with ErrLockLost", got, err)
	}
}

// TestRedlockFailedAttemptLeavesNoLateKeys: nodes too slow to answer in time may still apply the
// acquisition later; a failed attempt must release on them too, or they block everyone for a TTL.
func TestRedlockFailedAttemptLeavesNoLateKeys(t *testing.T) {
	c, srvs := redlock(t, 3, WithNodeTimeout(50*time.Millisecond))
	key := uniqueKey(t)
	// Warm up connections and the script cache: otherwise the acquisition would wait behind the
	// handshake, or meet NOSCRIPT, and nothing would apply late.
	if err := mustAcquire(t, c, uniqueKey(t), time.Minute).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	srvs[0].Pause(t)
	srvs[1].Pause(t)
	_, err := c.Acquire(context.Background(), key, time.Minute)
	var ne *NodeError
	if err == nil || errors.Is(err, ErrNotAcquired) || !errors.As(err, &ne) {
		t.Fatalf("got %v, want an unavailability error", err)
	}
	srvs[0].Resume(t)
	srvs[1].Resume(t)
	// The paused nodes now run the queued acquisition, then the release queued behind it.
	eventually(t, 5*time.Second, "no lock keys left on any node", func() bool { return keysLeft(t, c, srvs, key) == 0 })
	l, err := c.Acquire(context.Background(), key, time.Minute)
	if err != nil {
		t.Fatalf("Acquire after the failed attempt: %v", err)
	}
	_ = l.Release(context.Background())
}
