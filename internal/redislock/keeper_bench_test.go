package redislock

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkKeeperRound: the keeper's own work for one round of renewals, without Redis: picking
// every due lock into a round, then settling the round's answers (new leases, the next due times,
// both heaps). One op is one round of n locks. BenchmarkRenew10k in test/bench measures a whole
// round against a real server, where the pipeline's cost hides the keeper's; this one shows what
// scheduling costs per renewal and that it does not allocate per lock.
func BenchmarkKeeperRound(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			// A client that is never dialled: the benchmark sends nothing.
			rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			b.Cleanup(func() { _ = rc.Close() })
			c, err := New(rc)
			if err != nil {
				b.Fatal(err)
			}
			k := c.NewKeeper(KeeperOptions{BatchSize: n})
			// The keeper's goroutine would start rounds of its own: stop it and drive the keeper's
			// state by hand, as its goroutine does.
			k.Stop()

			const ttl, interval = 30 * time.Second, 10 * time.Second
			now := time.Now()
			tallies := make([]tally, n)
			for i := range n {
				l := &Lock{client: c, key: fmt.Sprintf("bench-%d", i), ttl: ttl, leaseStart: now, validUntil: c.validUntil(now, ttl)}
				e := &keeperEntry{lock: l, interval: interval, margin: ttl / 3, due: now, dueIndex: -1, watchIndex: -1}
				e.watchAt = e.watchTime(l.validUntil)
				k.entries[l] = e
				k.due.set(e)
				k.watch.set(e)
				tallies[i].ok = 1
			}

			b.ReportAllocs()
			for b.Loop() {
				k.mu.Lock()
				r, _, ok := k.startRoundLocked(now, 1, nil)
				k.mu.Unlock()
				if !ok || len(r.batch) != n {
					b.Fatalf("round of %d locks, want %d", len(r.batch), n)
				}
				end := now.Add(time.Millisecond)
				k.settle(roundResult{round: r, start: now, end: end, tallies: tallies})
				// Every lock is due again one interval later.
				now = now.Add(interval)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/renewal")
		})
	}
}
