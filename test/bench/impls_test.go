package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// lockTTL is the lease every implementation asks for in the acquire/release benchmarks. It is far
// longer than any benchmark holds a lock, so no lease ever expires under us.
const lockTTL = 10 * time.Second

// worker is one goroutine's handle on one lock key, for one implementation. Acquire blocks (retrying
// at the implementation's fixed interval) when the worker was built with a retry delay, and tries
// once otherwise. A worker is used by a single goroutine.
type worker interface {
	Acquire(ctx context.Context) error
	Release(ctx context.Context) error
}

// factory builds a worker for key; retry 0 means "try once".
type factory func(key string, retry time.Duration) worker

// errRawBusy is the raw baseline's "someone else holds it".
var errRawBusy = errors.New("raw: lock is held")

// isBusy reports whether err only means "the lock is held by someone else" (or an implementation
// gave up waiting for it), as opposed to a failure that should stop a benchmark.
func isBusy(err error) bool {
	var taken *redsync.ErrTaken
	return errors.Is(err, redislock.ErrNotAcquired) ||
		errors.Is(err, bsm.ErrNotObtained) ||
		errors.Is(err, redsync.ErrFailed) ||
		errors.As(err, &taken) ||
		errors.Is(err, errRawBusy) ||
		// bsm puts a deadline of one TTL on an Obtain whose context has none.
		errors.Is(err, context.DeadlineExceeded)
}

// ---- round-trip counting ----------------------------------------------------------------------

// rttCounter is a go-redis hook that counts network round trips: one per command sent on its own
// (Process) and one per pipeline, however many commands it carries.
type rttCounter struct{ n atomic.Int64 }

func (c *rttCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rttCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *rttCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// counters sums several rttCounters (one per Redis node).
type counters []*rttCounter

func (cs counters) reset() {
	for _, c := range cs {
		c.n.Store(0)
	}
}

func (cs counters) total() int64 {
	var t int64
	for _, c := range cs {
		t += c.n.Load()
	}
	return t
}

// reportRTT reports round trips per op; ops is the number of operations the counters covered.
func (cs counters) reportRTT(b *testing.B, ops int) {
	if ops > 0 {
		b.ReportMetric(float64(cs.total())/float64(ops), "rtt/op")
	}
}

// newClient returns a go-redis client for addr with a round-trip counter installed. Every
// implementation gets the same client configuration. The pool (128 connections) is larger than the
// most goroutines any benchmark runs (64), so no benchmark measures waiting for a pooled connection.
// Maintenance notifications are off: they are a Redis Cloud feature and would add a command to each
// new connection.
func newClient(tb testing.TB, addr string) (*redis.Client, *rttCounter) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		PoolSize:                 128,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	tb.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("ping %s: %v", addr, err)
	}
	ctr := &rttCounter{}
	c.AddHook(ctr)
	return c, ctr
}

// ---- lockedjob (internal/redislock) -----------------------------------------------------------

type lockedjobWorker struct {
	c    *redislock.Client
	key  string
	opts []redislock.AcquireOption
	l    *redislock.Lock
}

func lockedjobFactory(c *redislock.Client) factory {
	return func(key string, retry time.Duration) worker {
		w := &lockedjobWorker{c: c, key: key}
		if retry > 0 {
			w.opts = []redislock.AcquireOption{redislock.WithRetry(redislock.FixedBackoff(retry))}
		}
		return w
	}
}

func (w *lockedjobWorker) Acquire(ctx context.Context) error {
	l, err := w.c.Acquire(ctx, w.key, lockTTL, w.opts...)
	if err != nil {
		return err
	}
	w.l = l
	return nil
}

func (w *lockedjobWorker) Release(ctx context.Context) error {
	l := w.l
	w.l = nil
	return l.Release(ctx)
}

// lockedjobQueueWorker waits in the lock's fair queue (redislock.WithQueue): a free lock goes only
// to the waiter that has waited longest. The score is the time the worker started waiting.
type lockedjobQueueWorker struct {
	lockedjobWorker
	member string
}

// queueLiveness is how long a queued waiter that stops asking keeps its place. Waiters here ask
// every 10ms and never vanish; a release hands the lock off for min(ttl, liveness), so a liveness
// of a whole lease lets the waiter use the handoff as it arrives instead of claiming it first.
const queueLiveness = lockTTL

func lockedjobQueueFactory(c *redislock.Client) factory {
	var n atomic.Int64
	return func(key string, retry time.Duration) worker {
		w := &lockedjobQueueWorker{lockedjobWorker: lockedjobWorker{c: c, key: key}, member: fmt.Sprintf("w-%d", n.Add(1))}
		if retry > 0 {
			w.opts = []redislock.AcquireOption{redislock.WithRetry(redislock.FixedBackoff(retry))}
		}
		return w
	}
}

func (w *lockedjobQueueWorker) Acquire(ctx context.Context) error {
	score := float64(time.Now().UnixMicro())
	opts := append(slices.Clip(w.opts), redislock.WithQueue(w.member, score, queueLiveness))
	l, err := w.c.Acquire(ctx, w.key, lockTTL, opts...)
	if err != nil {
		if ctx.Err() != nil {
			// Giving up: leave the queue so the next run does not wait for a ghost.
			_ = w.c.Dequeue(context.Background(), w.key, w.member)
		}
		return err
	}
	w.l = l
	return nil
}

// ---- github.com/bsm/redislock -----------------------------------------------------------------

type bsmWorker struct {
	c   *bsm.Client
	key string
	opt *bsm.Options
	l   *bsm.Lock
}

func bsmFactory(c *bsm.Client) factory {
	return func(key string, retry time.Duration) worker {
		w := &bsmWorker{c: c, key: key}
		if retry > 0 {
			w.opt = &bsm.Options{RetryStrategy: bsm.LinearBackoff(retry)}
		}
		return w
	}
}

func (w *bsmWorker) Acquire(ctx context.Context) error {
	l, err := w.c.Obtain(ctx, w.key, lockTTL, w.opt)
	if err != nil {
		return err
	}
	w.l = l
	return nil
}

func (w *bsmWorker) Release(ctx context.Context) error {
	l := w.l
	w.l = nil
	return l.Release(ctx)
}

// ---- github.com/go-redsync/redsync/v4 ---------------------------------------------------------

// redsyncWorker reuses one Mutex per goroutine, redsync's idiom for locking a name repeatedly.
type redsyncWorker struct{ m *redsync.Mutex }

func redsyncFactory(rs *redsync.Redsync) factory {
	return func(key string, retry time.Duration) worker {
		opts := []redsync.Option{redsync.WithExpiry(lockTTL), redsync.WithTries(1)}
		if retry > 0 {
			// "Enough tries": the benchmark ends waiters through their context, never through this.
			opts = append(opts, redsync.WithRetryDelay(retry), redsync.WithTries(math.MaxInt32))
		}
		return &redsyncWorker{m: rs.NewMutex(key, opts...)}
	}
}

func (w *redsyncWorker) Acquire(ctx context.Context) error { return w.m.LockContext(ctx) }

func (w *redsyncWorker) Release(ctx context.Context) error {
	ok, err := w.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported not held")
	}
	return err
}

func redsyncFor(clients ...*redis.Client) *redsync.Redsync {
	pools := make([]redsyncpool.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	return redsync.New(pools...)
}

// ---- raw go-redis baseline --------------------------------------------------------------------

// rawRelease is a compare-and-delete: the least any safe lock must do on release.
const rawRelease = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`

// rawRenew is a compare-and-PEXPIRE, for the renewal baseline.
const rawRenew = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`

// loadScript loads src into every node once and returns its SHA, so the raw baseline can call
// EVALSHA directly: exactly one round trip, no NOSCRIPT fallback.
func loadScript(tb testing.TB, src string, nodes ...*redis.Client) string {
	tb.Helper()
	var sha string
	for _, n := range nodes {
		s, err := n.ScriptLoad(context.Background(), src).Result()
		if err != nil {
			tb.Fatalf("script load: %v", err)
		}
		sha = s
	}
	return sha
}

func rawToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// rawWorker is SET key token NX PX ttl, then EVALSHA compare-and-delete, with a plain sleep between
// attempts when retrying. With several nodes it is a minimal Redlock: both steps fan out to all
// nodes concurrently and need a majority.
type rawWorker struct {
	nodes      []*redis.Client
	releaseSHA string
	key        string
	retry      time.Duration
	token      string
}

func rawFactory(releaseSHA string, nodes ...*redis.Client) factory {
	return func(key string, retry time.Duration) worker {
		return &rawWorker{nodes: nodes, releaseSHA: releaseSHA, key: key, retry: retry}
	}
}

func (w *rawWorker) Acquire(ctx context.Context) error {
	token, err := rawToken()
	if err != nil {
		return err
	}
	var timer *time.Timer
	for {
		ok, err := w.tryOnce(ctx, token)
		if err != nil {
			return err
		}
		if ok {
			w.token = token
			return nil
		}
		if w.retry <= 0 {
			return errRawBusy
		}
		if timer == nil {
			timer = time.NewTimer(w.retry)
			defer timer.Stop()
		} else {
			timer.Reset(w.retry)
		}
		select {
		case <-ctx.Done():
			return errors.Join(errRawBusy, ctx.Err())
		case <-timer.C:
		}
	}
}

func (w *rawWorker) tryOnce(ctx context.Context, token string) (bool, error) {
	if len(w.nodes) == 1 {
		return w.nodes[0].SetNX(ctx, w.key, token, lockTTL).Result()
	}
	granted := fanOut(w.nodes, func(n *redis.Client) bool {
		ok, err := n.SetNX(ctx, w.key, token, lockTTL).Result()
		return err == nil && ok
	})
	if granted > len(w.nodes)/2 {
		return true, nil
	}
	if granted > 0 {
		w.releaseOn(ctx, token)
	}
	return false, nil
}

func (w *rawWorker) Release(ctx context.Context) error {
	token := w.token
	w.token = ""
	if n := w.releaseOn(ctx, token); n <= len(w.nodes)/2 {
		return fmt.Errorf("raw: released on %d of %d nodes", n, len(w.nodes))
	}
	return nil
}

func (w *rawWorker) releaseOn(ctx context.Context, token string) int {
	release := func(n *redis.Client) bool {
		v, err := n.EvalSha(ctx, w.releaseSHA, []string{w.key}, token).Int64()
		return err == nil && v == 1
	}
	if len(w.nodes) == 1 {
		if release(w.nodes[0]) {
			return 1
		}
		return 0
	}
	return fanOut(w.nodes, release)
}

// fanOut calls f on every node concurrently and counts the nodes for which it returned true.
func fanOut(nodes []*redis.Client, f func(*redis.Client) bool) int {
	var ok atomic.Int32
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			if f(n) {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// ---- server CPU ------------------------------------------------------------------------------

// serverCPU is the summed user+system CPU time of the redis-server processes behind clients, from
// INFO cpu (getrusage inside Redis). The clients should carry no RTT hook, so reading this is not
// counted as a round trip of the implementation under test.
func serverCPU(tb testing.TB, clients []*redis.Client) time.Duration {
	tb.Helper()
	var total time.Duration
	for _, c := range clients {
		info, err := c.Info(context.Background(), "cpu").Result()
		if err != nil {
			tb.Fatalf("info cpu: %v", err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
				continue
			}
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("info cpu %s=%q: %v", k, v, err)
			}
			total += time.Duration(sec * float64(time.Second))
		}
	}
	return total
}

// statsClients returns hook-free clients for reading server statistics.
func statsClients(tb testing.TB, addrs ...string) []*redis.Client {
	tb.Helper()
	out := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		out[i] = redis.NewClient(&redis.Options{
			Addr:                     a,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		tb.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}

// ---- client CPU ------------------------------------------------------------------------------

// cpuTime is this process's user+system CPU time. redis-server runs in its own process, so this is
// the client's cost alone.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
