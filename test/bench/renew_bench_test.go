package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

const (
	// renewTTL is long so that no lock expires between sub-benchmarks on a loaded machine; the
	// keeper and Renew both keep this lease length.
	renewTTL = 30 * time.Second
	// keeperInterval is how often the keeper renews each lock. It only spaces the rounds out: the
	// keeper's cost is measured as its busy time, see renewStats.
	keeperInterval = 300 * time.Millisecond
	// renewWait bounds the wait for one round of keeper renewals, so a broken run fails instead of
	// hanging until the test timeout.
	renewWait = 60 * time.Second
)

// BenchmarkRenew10k: renewing 10,000 held locks once each; one op is 10,000 renewals.
//
//   - impl=keeper: a redislock Keeper (default BatchSize 1000) renewing the 10,000 locks every
//     300ms. ns/op is the keeper's busy wall time per 10,000 successful renewals: for each pipeline
//     batch, from the instant the keeper sent it (recovered from Lock.ValidUntil, since the client
//     runs with zero drift allowance) to the OnRenew callback of the batch's last lock. The idle time
//     between rounds, which only the interval decides, is left out.
//   - impl=renew-each: (*Lock).Renew called 10,000 times in sequence, one round trip each.
//   - impl=raw-pipeline: one go-redis pipeline of 10,000 EVALSHA compare-and-PEXPIRE scripts.
//
// cpu-ns/renewal is this process's user+system CPU (getrusage) per renewal; redis-server is another
// process, so it is the client's CPU alone.
func BenchmarkRenew10k(b *testing.B) {
	s := redisserver.Start(b)

	stats := statsClients(b, s.Addr())
	c, ctr := newClient(b, s.Addr())
	lc, err := redislock.New(c, redislock.WithDrift(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	locks := acquireMany(b, lc, renewLocks)

	b.Run("impl=keeper", func(b *testing.B) { benchKeeper(b, lc, locks, counters{ctr}, stats) })

	b.Run("impl=renew-each", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		counters{ctr}.reset()
		cpu0, srv0 := cpuTime(b), serverCPU(b, stats)
		for b.Loop() {
			for _, l := range locks {
				if err := l.Renew(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportRenewals(b, b.N*renewLocks, b.Elapsed(), cpuTime(b)-cpu0, serverCPU(b, stats)-srv0)
		counters{ctr}.reportRTT(b, b.N)
	})

	rc, rctr := newClient(b, s.Addr())
	keys, tokens := rawLocks(b, rc, renewLocks)
	sha := loadScript(b, rawRenew, rc)
	ttlMs := renewTTL.Milliseconds()
	b.Run("impl=raw-pipeline", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		counters{rctr}.reset()
		cpu0, srv0 := cpuTime(b), serverCPU(b, stats)
		for b.Loop() {
			cmds, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					p.EvalSha(ctx, sha, []string{k}, tokens[i], ttlMs)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			for _, cmd := range cmds {
				if v, err := cmd.(*redis.Cmd).Int64(); err != nil || v != 1 {
					b.Fatalf("raw renew: %v %v", v, err)
				}
			}
		}
		reportRenewals(b, b.N*renewLocks, b.Elapsed(), cpuTime(b)-cpu0, serverCPU(b, stats)-srv0)
		counters{rctr}.reportRTT(b, b.N)
	})
}

func reportRenewals(b *testing.B, renewals int, wall, cpu, srv time.Duration) {
	b.ReportMetric(float64(wall.Nanoseconds())/float64(renewals), "ns/renewal")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(renewals), "cpu-ns/renewal")
	b.ReportMetric(float64(srv.Nanoseconds())/float64(renewals), "srv-cpu-ns/renewal")
}

func benchKeeper(b *testing.B, lc *redislock.Client, locks []*redislock.Lock, rtt counters, stats []*redis.Client) {
	b.ReportAllocs()
	st := newRenewStats()
	k := lc.NewKeeper(redislock.KeeperOptions{OnRenew: st.onRenew, OnLost: st.onLost})
	defer k.Stop()

	// Add every lock only once all of them are due, so the first round is one continuous sweep
	// rather than many small batches spread over the time it took to acquire them.
	var lastGrant time.Time
	for _, l := range locks {
		if g := l.ValidUntil().Add(-renewTTL); g.After(lastGrant) {
			lastGrant = g
		}
	}
	time.Sleep(time.Until(lastGrant.Add(keeperInterval)))
	for _, l := range locks {
		if err := k.Add(l, keeperInterval); err != nil {
			b.Fatal(err)
		}
	}
	// One warm-up round, then measure from a round boundary.
	if err := st.waitFor(renewLocks); err != nil {
		b.Fatal(err)
	}

	rtt.reset()
	cpu0, srv0 := cpuTime(b), serverCPU(b, stats)
	start := st.snapshot()
	want := start.count
	for b.Loop() {
		want += renewLocks
		if err := st.waitFor(want); err != nil {
			b.Fatal(err)
		}
	}
	end := st.snapshot()
	cpu, srv := cpuTime(b)-cpu0, serverCPU(b, stats)-srv0
	rtTotal := rtt.total()
	k.Stop()

	renewals := end.count - start.count
	busy := end.busy - start.busy
	rounds := float64(renewals) / renewLocks
	// ns/op is the keeper's busy time per 10,000 renewals, not the interval-paced wall time that the
	// benchmark loop itself spent waiting.
	b.ReportMetric(float64(busy.Nanoseconds())/rounds, "ns/op")
	reportRenewals(b, int(renewals), busy, cpu, srv)
	b.ReportMetric(float64(rtTotal)/rounds, "rtt/op")
}

// renewStats follows a Keeper through its OnRenew callbacks, which it calls from its own goroutine,
// batch after batch.
type renewStats struct {
	mu         sync.Mutex
	count      int64
	busy       time.Duration // summed duration of the finished batches
	batchStart time.Time     // when the keeper sent the current batch
	batchEnd   time.Time     // the latest callback of the current batch
	err        error
	target     int64 // the count waitFor waits for; the callback wakes it only then
	notify     chan struct{}
}

type renewSnapshot struct {
	count int64
	busy  time.Duration
}

func newRenewStats() *renewStats { return &renewStats{notify: make(chan struct{}, 1)} }

func (s *renewStats) onRenew(l *redislock.Lock, err error) {
	now := time.Now()
	// With zero drift allowance a renewal sets ValidUntil to its start plus the lease, and the keeper
	// takes one start time per batch: a new start means a new batch.
	started := l.ValidUntil().Add(-renewTTL)
	s.mu.Lock()
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("renewal of %s failed: %w", l.Key(), err)
	}
	if !started.Equal(s.batchStart) {
		if !s.batchStart.IsZero() {
			s.busy += s.batchEnd.Sub(s.batchStart)
		}
		s.batchStart = started
	}
	s.batchEnd = now
	s.count++
	wake := s.count == s.target || s.err != nil
	s.mu.Unlock()
	if wake {
		s.wake()
	}
}

func (s *renewStats) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *renewStats) onLost(l *redislock.Lock, err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("lock %s lost: %w", l.Key(), err)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *renewStats) snapshot() renewSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := s.busy
	if !s.batchStart.IsZero() {
		busy += s.batchEnd.Sub(s.batchStart)
	}
	return renewSnapshot{count: s.count, busy: busy}
}

// waitFor blocks until n renewals have been counted.
func (s *renewStats) waitFor(n int64) error {
	timeout := time.NewTimer(renewWait)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		s.target = n
		count, err := s.count, s.err
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if count >= n {
			return nil
		}
		select {
		case <-s.notify:
		case <-timeout.C:
			return fmt.Errorf("only %d of %d renewals after %v", count, n, renewWait)
		}
	}
}

// acquireMany takes n locks with the lockedjob client, 32 goroutines at a time.
func acquireMany(tb testing.TB, lc *redislock.Client, n int) []*redislock.Lock {
	tb.Helper()
	locks := make([]*redislock.Lock, n)
	errs := make([]error, n)
	const workers = 32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				locks[i], errs[i] = lc.Acquire(context.Background(), fmt.Sprintf("renew-%d", i), renewTTL)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return locks
}

// rawLocks takes n locks with plain SET NX PX in one pipeline, for the raw renewal baseline.
func rawLocks(tb testing.TB, c *redis.Client, n int) (keys, tokens []string) {
	tb.Helper()
	ctx := context.Background()
	keys, tokens = make([]string, n), make([]string, n)
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			tok, err := rawToken()
			if err != nil {
				return err
			}
			keys[i], tokens[i] = fmt.Sprintf("raw-renew-%d", i), tok
			p.SetNX(ctx, keys[i], tok, renewTTL)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, cmd := range cmds {
		if !cmd.(*redis.BoolCmd).Val() {
			tb.Fatalf("raw lock %v not acquired", cmd.Args())
		}
	}
	return keys, tokens
}
