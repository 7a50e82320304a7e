// Package bench compares internal/redislock ("lockedjob") with github.com/bsm/redislock,
// github.com/go-redsync/redsync/v4 and a raw go-redis baseline, side by side on real redis-server
// processes. It is its own module so the peer libraries never enter the root module's
// dependencies. See docs/benchmarks.md for what each benchmark measures and how to run them.
package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

const (
	// parallelGoroutines is the goroutine count of BenchmarkParallelDistinctKeys.
	parallelGoroutines = 64
	// contendedGoroutines compete for one key in BenchmarkContendedOneKey.
	contendedGoroutines = 32
	// redlockNodeTimeout is lockedjob's per-node timeout in BenchmarkRedlock3: redsync's default
	// for lockTTL (expiry * timeoutFactor 0.05).
	redlockNodeTimeout = lockTTL / 20
	// contendedRetry is every implementation's fixed retry interval in BenchmarkContendedOneKey.
	contendedRetry = 10 * time.Millisecond
	// renewLocks is the number of locks BenchmarkRenew10k renews per op.
	renewLocks = 10_000
)

// impl is one implementation under test, with the round-trip counters of its Redis clients.
type impl struct {
	name  string
	mk    factory
	rtt   counters
	stats []*redis.Client // hook-free clients of the same servers, for serverCPU
}

// singleNodeImpls builds every implementation against one Redis. Each gets its own go-redis client
// (same options), so the round-trip counts and connection pools are not shared.
func singleNodeImpls(tb testing.TB, addr string) []impl {
	tb.Helper()
	stats := statsClients(tb, addr)
	var out []impl

	c, ctr := newClient(tb, addr)
	lc, err := redislock.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out, impl{"lockedjob", lockedjobFactory(lc), counters{ctr}, stats})

	c, ctr = newClient(tb, addr)
	out = append(out, impl{"bsm", bsmFactory(bsm.New(c)), counters{ctr}, stats})

	c, ctr = newClient(tb, addr)
	out = append(out, impl{"redsync", redsyncFactory(redsyncFor(c)), counters{ctr}, stats})

	c, ctr = newClient(tb, addr)
	out = append(out, impl{"raw", rawFactory(loadScript(tb, rawRelease, c), c), counters{ctr}, stats})
	return out
}

// redlockImpls builds the implementations that support a quorum of independent nodes. bsm/redislock
// has no Redlock mode, so it is absent here.
func redlockImpls(tb testing.TB, servers []*redisserver.Server) []impl {
	tb.Helper()
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	stats := statsClients(tb, addrs...)
	newNodes := func() ([]*redis.Client, counters) {
		var cs []*redis.Client
		var ctrs counters
		for _, s := range servers {
			c, ctr := newClient(tb, s.Addr())
			cs = append(cs, c)
			ctrs = append(ctrs, ctr)
		}
		return cs, ctrs
	}
	var out []impl

	cs, ctrs := newNodes()
	universal := make([]redis.UniversalClient, len(cs))
	for i, c := range cs {
		universal[i] = c
	}
	// redsync bounds each acquire by expiry*0.05 (500ms for lockTTL); lockedjob's default per-node
	// timeout is 50ms, which a loaded 2-core machine overruns (see docs/benchmarks.md). Give both the
	// same bound, so the benchmark compares speed rather than timeout policy.
	lc, err := redislock.NewRedlock(universal, redislock.WithNodeTimeout(redlockNodeTimeout))
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out, impl{"lockedjob", lockedjobFactory(lc), ctrs, stats})

	cs, ctrs = newNodes()
	out = append(out, impl{"redsync", redsyncFactory(redsyncFor(cs...)), ctrs, stats})

	cs, ctrs = newNodes()
	out = append(out, impl{"raw", rawFactory(loadScript(tb, rawRelease, cs...), cs...), ctrs, stats})
	return out
}

// cycle is one Acquire+Release on w.
func cycle(ctx context.Context, w worker) error {
	if err := w.Acquire(ctx); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := w.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// benchCycle times Acquire+Release on one key from one goroutine, for each implementation.
func benchCycle(b *testing.B, impls []impl) {
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			w := im.mk("cycle-"+im.name, 0)
			if err := cycle(ctx, w); err != nil { // warm the pool and the script cache
				b.Fatal(err)
			}
			im.rtt.reset()
			cpu0, srv0 := cpuTime(b), serverCPU(b, im.stats)
			for b.Loop() {
				if err := cycle(ctx, w); err != nil {
					b.Fatal(err)
				}
			}
			im.report(b, b.N, cpu0, srv0)
		})
	}
}

// BenchmarkUncontended: one goroutine, one key, Acquire then Release, one Redis.
func BenchmarkUncontended(b *testing.B) {
	s := redisserver.Start(b)
	benchCycle(b, singleNodeImpls(b, s.Addr()))
}

// BenchmarkRedlock3: as BenchmarkUncontended, on a quorum of 3 independent Redis servers.
// bsm/redislock has no Redlock mode and is not in this benchmark.
func BenchmarkRedlock3(b *testing.B) {
	servers := redisserver.StartN(b, 3)
	benchCycle(b, redlockImpls(b, servers))
}

// BenchmarkParallelDistinctKeys: 64 goroutines, each with its own key, each op one Acquire+Release.
func BenchmarkParallelDistinctKeys(b *testing.B) {
	s := redisserver.Start(b)
	procs := runtime.GOMAXPROCS(0)
	parallelism := (parallelGoroutines + procs - 1) / procs // RunParallel starts parallelism*GOMAXPROCS goroutines
	for _, im := range singleNodeImpls(b, s.Addr()) {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(parallelism)
			ctx := context.Background()
			var ids atomic.Int64
			im.rtt.reset()
			cpu0, srv0 := cpuTime(b), serverCPU(b, im.stats)
			b.RunParallel(func(pb *testing.PB) {
				w := im.mk(fmt.Sprintf("par-%s-%d", im.name, ids.Add(1)), 0)
				for pb.Next() {
					if err := cycle(ctx, w); err != nil {
						b.Error(err)
						return
					}
				}
			})
			im.report(b, b.N, cpu0, srv0)
			b.ReportMetric(float64(ids.Load()), "goroutines")
		})
	}
}

// BenchmarkContendedOneKey: 32 goroutines compete for one key. Each loops: Acquire with a fixed 10ms
// retry, Release at once (hold time zero, the same for all), Acquire again. One op is one successful
// acquisition by any goroutine: b.N acquisitions in total, so ns/op is the inverse of throughput.
// acq/s is that throughput; cv is the coefficient of variation (stddev/mean) of the acquisitions
// per goroutine, 0 for perfectly fair; rtt/op counts every round trip, failed attempts included.
// impl=lockedjob-queue is lockedjob with its fair waiter queue (WithQueue) on top of the same retry:
// a release hands the lock to the longest waiter and tells it over pub/sub.
func BenchmarkContendedOneKey(b *testing.B) {
	s := redisserver.Start(b)
	impls := singleNodeImpls(b, s.Addr())
	qc, qctr := newClient(b, s.Addr())
	// The queue hands the lock from holder to head on release; the release channel tells the head
	// at once instead of at its next 10ms retry.
	ql, err := redislock.New(qc, redislock.WithReleaseNotifications("bench:released"))
	if err != nil {
		b.Fatal(err)
	}
	impls = slices.Insert(impls, 1, impl{"lockedjob-queue", lockedjobQueueFactory(ql), counters{qctr}, impls[0].stats})
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			b.ReportAllocs()
			key := "contended-" + im.name
			workers := make([]worker, contendedGoroutines)
			for i := range workers {
				workers[i] = im.mk(key, contendedRetry)
			}
			if err := cycle(context.Background(), workers[0]); err != nil { // warm up
				b.Fatal(err)
			}
			wins, elapsed, cpu0, srv0 := runContended(b, workers, im)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
			b.ReportMetric(coefficientOfVariation(wins), "cv")
			im.report(b, b.N, cpu0, srv0)
		})
	}
}

// runContended lets the workers compete until b.N acquisitions were made and returns each worker's
// count and the time from the start to the release of the last counted acquisition.
// It also returns the client and server CPU times read at the start.
func runContended(b *testing.B, workers []worker, im impl) (wins []int64, elapsed, cpu0, srv0 time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		remaining atomic.Int64
		start     = make(chan struct{})
		wg        sync.WaitGroup
		endMu     sync.Mutex
		end       time.Time
		errMu     sync.Mutex
		firstErr  error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel()
	}
	remaining.Store(int64(b.N))
	wins = make([]int64, len(workers))
	for i, w := range workers {
		wg.Go(func() {
			<-start
			for ctx.Err() == nil {
				if err := w.Acquire(ctx); err != nil {
					if ctx.Err() != nil {
						return
					}
					if isBusy(err) {
						continue
					}
					fail(fmt.Errorf("worker %d: acquire: %w", i, err))
					return
				}
				ticket := remaining.Add(-1)
				if ticket >= 0 {
					wins[i]++
				}
				// Released with a context of its own: a lock acquired as the run ends must not be left behind.
				if err := w.Release(context.Background()); err != nil {
					fail(fmt.Errorf("worker %d: release: %w", i, err))
					return
				}
				if ticket == 0 {
					endMu.Lock()
					end = time.Now()
					endMu.Unlock()
					cancel()
				}
				if ticket <= 0 {
					return
				}
			}
		})
	}
	im.rtt.reset()
	cpu0, srv0 = cpuTime(b), serverCPU(b, im.stats)
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return wins, end.Sub(t0), cpu0, srv0
}

// report reports, per op, the round trips, this process's CPU time and the Redis servers' CPU time
// since cpu0 and srv0 were read.
func (im impl) report(b *testing.B, ops int, cpu0, srv0 time.Duration) {
	cpu, srv := cpuTime(b)-cpu0, serverCPU(b, im.stats)-srv0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(ops), "cpu-ns/op")
	b.ReportMetric(float64(srv.Nanoseconds())/float64(ops), "srv-cpu-ns/op")
	im.rtt.reportRTT(b, ops)
}

// coefficientOfVariation is the population standard deviation of xs over their mean.
func coefficientOfVariation(xs []int64) float64 {
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	var sq float64
	for _, x := range xs {
		d := float64(x) - mean
		sq += d * d
	}
	return math.Sqrt(sq/float64(len(xs))) / mean
}
