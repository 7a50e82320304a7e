package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// lostRecorder collects OnLost calls with the time they happened.
type lostRecorder struct {
	mu   sync.Mutex
	lost map[*Lock]error
	at   map[*Lock]time.Time
	ch   chan *Lock
}

func newLostRecorder() *lostRecorder {
	return &lostRecorder{lost: map[*Lock]error{}, at: map[*Lock]time.Time{}, ch: make(chan *Lock, 16)}
}

func (r *lostRecorder) onLost(l *Lock, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.lost[l]; dup {
		panic("OnLost called twice for one lock")
	}
	r.lost[l], r.at[l] = err, time.Now()
	select {
	case r.ch <- l:
	default:
	}
}

// wait returns the next lock reported lost, when, and the cause OnLost was given.
func (r *lostRecorder) wait(t *testing.T, timeout time.Duration) (*Lock, time.Time, error) {
	t.Helper()
	select {
	case l := <-r.ch:
		r.mu.Lock()
		defer r.mu.Unlock()
		return l, r.at[l], r.lost[l]
	case <-time.After(timeout):
		t.Fatalf("no lost lock reported within %v", timeout)
		return nil, time.Time{}, nil
	}
}

// TestKeeperRenewsTenThousandLocks: one keeper keeps 10,000 locks alive well past their lease, and
// a lock deleted behind its back is reported within one renew interval.
func TestKeeperRenewsTenThousandLocks(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	const n = 10000
	const ttl, interval = 3 * time.Second, time.Second

	locks := make([]*Lock, n)
	for i := range locks {
		locks[i] = mustAcquire(t, c, fmt.Sprintf("%s/%d", uniqueKey(t), i), ttl)
	}
	var renewals atomic.Int64
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{
		OnLost: rec.onLost,
		OnRenew: func(_ *Lock, err error) {
			if err == nil {
				renewals.Add(1)
			}
		},
	})
	defer k.Stop()
	for _, l := range locks {
		if err := k.Add(l, interval); err != nil {
			t.Fatal(err)
		}
	}

	// Two full rounds of renewals take longer than one lease: every lock still existing afterwards
	// was renewed, not merely young.
	start := time.Now()
	eventually(t, 4*ttl, "two rounds of renewals", func() bool { return renewals.Load() >= 2*n && time.Since(start) > ttl })
	pipe := rc.Pipeline()
	cmds := make([]*redis.DurationCmd, n)
	for i, l := range locks {
		cmds[i] = pipe.PTTL(ctx, l.RedisKey())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if cmd.Val() <= 0 {
			t.Fatalf("lock %d expired although the keeper renews it (pttl %v)", i, cmd.Val())
		}
	}

	victim := locks[n/2]
	deleted := time.Now()
	if err := rc.Del(ctx, victim.RedisKey()).Err(); err != nil {
		t.Fatal(err)
	}
	got, at, err := rec.wait(t, 3*interval)
	if got != victim {
		t.Fatalf("reported %s lost, want %s", got.Key(), victim.Key())
	}
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("lost with %v, want ErrLockLost", err)
	}
	if took := at.Sub(deleted); took > interval+interval/4 {
		t.Fatalf("loss reported %v after the delete, want within one interval (%v)", took, interval)
	}
	if k.Len() != n-1 {
		t.Fatalf("keeper renews %d locks, want %d", k.Len(), n-1)
	}
}

// TestKeeperRidesOutShortOutage: a Redis that stops answering for less than the lease costs
// nothing; the keeper retries and the lock lives on.
func TestKeeperRidesOutShortOutage(t *testing.T) {
	c, srv, _ := single(t)
	l := mustAcquire(t, c, uniqueKey(t), 2*time.Second)
	var failed, renewedAfter atomic.Int64
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: func(_ *Lock, err error) {
		if err != nil {
			failed.Add(1)
		} else if failed.Load() > 0 {
			renewedAfter.Add(1)
		}
	}})
	defer k.Stop()
	if err := k.Add(l, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	eventually(t, 5*time.Second, "a failed renewal while Redis is paused", func() bool { return failed.Load() > 0 })
	srv.Resume(t)
	eventually(t, 5*time.Second, "a successful renewal after Redis resumed", func() bool { return renewedAfter.Load() > 0 })
	if !l.Held() || k.Len() != 1 {
		t.Fatal("lock lost over an outage shorter than its lease")
	}
	select {
	case lost := <-rec.ch:
		t.Fatalf("%s reported lost", lost.Key())
	default:
	}
}

// TestKeeperReportsLossWhenValidityRunsOut: while Redis does not answer, the keeper keeps trying,
// and reports the lock lost once its validity has run out — not before.
func TestKeeperReportsLossWhenValidityRunsOut(t *testing.T) {
	c, srv, _ := single(t)
	l := mustAcquire(t, c, uniqueKey(t), time.Second)
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost})
	defer k.Stop()
	if err := k.Add(l, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	validAtPause := l.ValidUntil()

	got, at, err := rec.wait(t, 5*time.Second)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v with %v, want our lock with ErrLockLost", got, err)
	}
	if _, ok := errors.AsType[*NodeError](err); !ok {
		t.Fatalf("loss by outage should carry the transport error: %v", err)
	}
	if at.Before(validAtPause) {
		t.Fatalf("reported lost at %v, before its validity ran out at %v", at, validAtPause)
	}
	if l.Held() {
		t.Fatal("lock still Held after reported lost")
	}
}

func TestKeeperRemoveAndRelease(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	rec := newLostRecorder()
	var renewals atomic.Int64
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: func(*Lock, error) { renewals.Add(1) }})
	defer k.Stop()

	kept := mustAcquire(t, c, uniqueKey(t), 300*time.Millisecond)
	released := mustAcquire(t, c, uniqueKey(t), 300*time.Millisecond)
	for _, l := range []*Lock{kept, released} {
		if err := k.Add(l, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !k.Remove(released) || k.Remove(released) {
		t.Fatal("Remove should report true once, then false")
	}
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "several renewals of the kept lock", func() bool { return renewals.Load() >= 5 })
	select {
	case l := <-rec.ch:
		t.Fatalf("%s reported lost", l.Key())
	default:
	}
	if err := k.Add(released, 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Add of a released lock: %v, want ErrNotHeld", err)
	}
	k.Stop()
	k.Stop() // idempotent
}

// TestKeeperReloadsScriptsAfterRestart: EVALSHA in a pipeline has no per-command fallback; the
// keeper must reload the script on a fresh server and carry on.
func TestKeeperReloadsScriptsAfterRestart(t *testing.T) {
	c, srv, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	l := mustAcquire(t, c, key, 2*time.Second, WithToken("tok"))
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost})
	defer k.Stop()

	srv.Restart(t)
	// Put the lock back by hand, as a replica that kept it would: the script cache is empty, the
	// key is ours.
	eventually(t, 5*time.Second, "the restarted server", func() bool {
		return rc.Set(ctx, l.RedisKey(), "tok", time.Second).Err() == nil
	})
	if err := k.Add(l, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal that extended the lock", func() bool {
		ttl, err := rc.PTTL(ctx, l.RedisKey()).Result()
		return err == nil && ttl > 1500*time.Millisecond // only a renewal sets it past the 1s we wrote
	})
	select {
	case lost := <-rec.ch:
		t.Fatalf("%s reported lost: %v", lost.Key(), rec.lost[lost])
	default:
	}
}

// proxied starts a real redis-server behind a fault proxy and returns a lock client that talks
// through the proxy, plus a direct client for looking at Redis without the fault. opts change the
// lock client's options.
func proxied(t *testing.T, opts ...func(*redis.Options)) (*Client, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redisserver.Start(t)
	p, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	o := &redis.Options{
		Addr:                  p.Addr(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           5 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
	}
	for _, opt := range opts {
		opt(o)
	}
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	c, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c, p, srv.Client(t)
}

func (r *lostRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lost)
}

// renewCounter counts successful renewals per lock.
type renewCounter struct {
	mu sync.Mutex
	n  map[*Lock]int
}

func (r *renewCounter) onRenew(l *Lock, err error) {
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[*Lock]int{}
	}
	r.n[l]++
}

func (r *renewCounter) count(l *Lock) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[l]
}

// each reports whether every lock in locks was renewed at least n times.
func (r *renewCounter) each(locks []*Lock, n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range locks {
		if r.n[l] < n {
			return false
		}
	}
	return true
}

// noLoss fails the test if any lock was reported lost.
func (r *lostRecorder) noLoss(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for l, err := range r.lost {
		t.Errorf("%s reported lost: %v", l.Key(), err)
	}
}

// TestKeeperTinyIntervalDoesNotStarveOthers (issue 9 item 5): one tenant's lock with a 1ms renew
// interval shares batches with everybody's locks; under moderate latency it must not make their
// renewals time out.
func TestKeeperTinyIntervalDoesNotStarveOthers(t *testing.T) {
	c, p, _ := proxied(t)
	const ttl = time.Second
	rec := newLostRecorder()
	var renewed renewCounter
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: renewed.onRenew})
	defer k.Stop()

	tiny := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(tiny, time.Millisecond); err != nil {
		t.Fatalf("Add with a 1ms interval: %v", err)
	}
	healthy := make([]*Lock, 5)
	for i := range healthy {
		healthy[i] = mustAcquire(t, c, uniqueKey(t), ttl)
		if err := k.Add(healthy[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	p.Delay(5 * time.Millisecond)
	start := time.Now()

	// Nine renewals of each healthy lock (every ttl/3) span three leases: a lock that is not renewed
	// is lost long before.
	eventually(t, 10*ttl, "nine renewals of every healthy lock, or a loss", func() bool {
		return rec.count() > 0 || renewed.each(healthy, 9)
	})
	rec.noLoss(t)
	for i, l := range append(healthy, tiny) {
		if !l.Held() {
			t.Errorf("lock %d not held", i)
		}
	}
	// The tiny interval was raised to the floor: a renewal at most every 7/8 of it (a lock due
	// within an eighth of its interval rides along with an earlier batch).
	elapsed := time.Since(start)
	if n, most := renewed.count(tiny), int(elapsed/(MinRenewInterval*7/8))+2; n > most {
		t.Errorf("tiny lock renewed %d times in %v, want at most %d", n, elapsed, most)
	}
}

// TestKeeperRenewsAt300msRTT (issue 9 item 27): Redis answers everyone, only slowly (300ms round
// trips), and a blip has just reset every connection. Locks with a 3s lease must live on.
func TestKeeperRenewsAt300msRTT(t *testing.T) {
	c, p, _ := proxied(t)
	const ttl = 3 * time.Second
	rec := newLostRecorder()
	var renewed renewCounter
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: renewed.onRenew})
	defer k.Stop()

	locks := make([]*Lock, 10)
	for i := range locks {
		locks[i] = mustAcquire(t, c, uniqueKey(t), ttl)
		if err := k.Add(locks[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	p.Reset()
	p.Delay(150 * time.Millisecond)

	// Six renewals of each lock (every ttl/3) span two leases under latency.
	eventually(t, 30*time.Second, "six renewals of every lock, or a loss", func() bool {
		return rec.count() > 0 || renewed.each(locks, 6)
	})
	rec.noLoss(t)
	for i, l := range locks {
		if !l.Held() {
			t.Errorf("lock %d not held", i)
		}
	}
}

// TestKeeperReportsLossAtValidUntil (issue 9 item 8): with Redis blackholed, the loss is reported
// when the lock's validity ends, not a renewal round later, and never before.
func TestKeeperReportsLossAtValidUntil(t *testing.T) {
	c, p, _ := proxied(t)
	const ttl, interval = 3 * time.Second, 1400 * time.Millisecond
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost})
	defer k.Stop()
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, interval); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	validUntil := l.ValidUntil()

	got, at, err := rec.wait(t, 3*ttl)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v with %v, want our lock with ErrLockLost", got, err)
	}
	late := at.Sub(validUntil)
	t.Logf("loss reported %v after ValidUntil", late)
	if late < 0 {
		t.Fatalf("loss reported %v before ValidUntil", -late)
	}
	if late > lossBound {
		t.Fatalf("loss reported %v after ValidUntil, want within %v", late, lossBound)
	}
}

// lossBound is how late after ValidUntil a loss may be reported: timer and scheduling latency on a
// loaded machine, nothing that depends on Redis.
const lossBound = 100 * time.Millisecond

// riskRecorder collects OnAtRisk calls with the time they happened.
type riskRecorder struct {
	mu  sync.Mutex
	n   int
	at  time.Time
	err error
	ch  chan struct{}
}

func newRiskRecorder() *riskRecorder { return &riskRecorder{ch: make(chan struct{}, 16)} }

func (r *riskRecorder) onAtRisk(_ *Lock, err error) {
	r.mu.Lock()
	r.n++
	if r.n == 1 {
		r.at, r.err = time.Now(), err
	}
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *riskRecorder) wait(t *testing.T, timeout time.Duration) (time.Time, error) {
	t.Helper()
	select {
	case <-r.ch:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.at, r.err
	case <-time.After(timeout):
		t.Fatalf("no OnAtRisk within %v", timeout)
		return time.Time{}, nil
	}
}

func (r *riskRecorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestKeeperAtRiskBeforeValidUntil (issue 9 item 8): with Redis blackholed, OnAtRisk comes once,
// when the margin before ValidUntil starts, and OnLost follows at ValidUntil.
func TestKeeperAtRiskBeforeValidUntil(t *testing.T) {
	c, p, _ := proxied(t)
	const ttl, margin = 3 * time.Second, 800 * time.Millisecond
	rec, risk := newLostRecorder(), newRiskRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnAtRisk: risk.onAtRisk, AtRiskMargin: margin})
	defer k.Stop()
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	validUntil := l.ValidUntil()

	riskAt, riskErr := risk.wait(t, 2*ttl)
	early := validUntil.Sub(riskAt)
	t.Logf("OnAtRisk %v before ValidUntil (margin %v): %v", early, margin, riskErr)
	if early <= 0 {
		t.Fatalf("OnAtRisk came %v after ValidUntil", -early)
	}
	if early > margin {
		t.Fatalf("OnAtRisk came %v before ValidUntil, earlier than the margin %v", early, margin)
	}
	if riskErr == nil {
		t.Fatal("OnAtRisk without a reason")
	}
	select {
	case got := <-rec.ch:
		t.Fatalf("%s reported lost before OnAtRisk returned to the test", got.Key())
	default:
	}

	got, lostAt, err := rec.wait(t, 2*ttl)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v with %v, want our lock with ErrLockLost", got, err)
	}
	late := lostAt.Sub(validUntil)
	t.Logf("OnLost %v after ValidUntil: %v", late, err)
	if late < 0 || late > lossBound {
		t.Fatalf("OnLost %v after ValidUntil, want within [0, %v]", late, lossBound)
	}
	if n := risk.calls(); n != 1 {
		t.Fatalf("OnAtRisk called %d times, want once", n)
	}
}

// TestKeeperAtRiskThenRecovers: a partition that heals inside the margin costs a warning, not the
// lock; the keeper renews on a new connection and the lock lives on.
func TestKeeperAtRiskThenRecovers(t *testing.T) {
	c, p, rc := proxied(t)
	const ttl = 3 * time.Second
	rec, risk := newLostRecorder(), newRiskRecorder()
	var renewed renewCounter
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnAtRisk: risk.onAtRisk, OnRenew: renewed.onRenew})
	defer k.Stop()
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	validUntil := l.ValidUntil()
	riskAt, cause := risk.wait(t, 2*ttl)
	t.Logf("OnAtRisk %v before ValidUntil: %v", validUntil.Sub(riskAt), cause)
	p.Pass()

	eventually(t, 2*ttl, "a renewal after the partition healed, or a loss", func() bool {
		return rec.count() > 0 || renewed.each([]*Lock{l}, 1)
	})
	rec.noLoss(t)
	if !l.ValidUntil().After(validUntil) {
		t.Fatalf("validity %v not extended past %v", l.ValidUntil(), validUntil)
	}
	if pttl, err := rc.PTTL(context.Background(), l.RedisKey()).Result(); err != nil || pttl <= 0 {
		t.Fatalf("lock key pttl %v, %v: want it alive", pttl, err)
	}
}

// TestKeeperAtRiskBehindHungRound: a lock that falls due while another lock's round waits on a
// blackholed Redis is reported at risk inside its margin, and lost at its ValidUntil, whether it
// went out in a round of its own or had to wait.
func TestKeeperAtRiskBehindHungRound(t *testing.T) {
	c, p, _ := proxied(t)
	lost := newLostRecorder()
	var mu sync.Mutex
	risky := map[*Lock]time.Time{}
	riskErr := map[*Lock]error{}
	k := c.NewKeeper(KeeperOptions{OnLost: lost.onLost, OnAtRisk: func(l *Lock, err error) {
		mu.Lock()
		defer mu.Unlock()
		risky[l], riskErr[l] = time.Now(), err
	}})
	defer k.Stop()

	// long is renewed first and its round waits for most of its 6s lease; short (2s) falls due
	// meanwhile.
	long := mustAcquire(t, c, uniqueKey(t), 6*time.Second)
	short := mustAcquire(t, c, uniqueKey(t), 2*time.Second)
	p.Blackhole()
	if err := k.Add(long, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := k.Add(short, 0); err != nil {
		t.Fatal(err)
	}
	validUntil := short.ValidUntil()

	got, lostAt, err := lost.wait(t, 5*time.Second)
	if got != short || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v lost with %v, want the short lock with ErrLockLost", got.Key(), err)
	}
	if late := lostAt.Sub(validUntil); late < 0 || late > lossBound {
		t.Fatalf("short lock reported lost %v after ValidUntil, want within [0, %v]", late, lossBound)
	}
	mu.Lock()
	defer mu.Unlock()
	at, ok := risky[short]
	if !ok {
		t.Fatal("short lock lost without OnAtRisk")
	}
	t.Logf("short lock at risk %v before ValidUntil: %v", validUntil.Sub(at), riskErr[short])
	if !at.Before(validUntil) {
		t.Fatalf("OnAtRisk %v after ValidUntil", at.Sub(validUntil))
	}
}

// TestKeeperIntervalFloor (issue 9 item 5): a lease too short for the renew floor is refused, and
// so is a negative interval; a short interval on a long enough lease is raised, not refused (see
// TestKeeperTinyIntervalDoesNotStarveOthers for its effect).
func TestKeeperIntervalFloor(t *testing.T) {
	c, _, _ := single(t)
	k := c.NewKeeper(KeeperOptions{})
	defer k.Stop()
	for name, add := range map[string]func() error{
		"lease at the floor": func() error { return k.Add(mustAcquire(t, c, uniqueKey(t), MinRenewInterval), 0) },
		"negative interval":  func() error { return k.Add(mustAcquire(t, c, uniqueKey(t), time.Second), -time.Millisecond) },
		"interval above ttl": func() error { return k.Add(mustAcquire(t, c, uniqueKey(t), time.Second), 2*time.Second) },
	} {
		if err := add(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := k.Add(mustAcquire(t, c, uniqueKey(t), time.Minute), time.Nanosecond); err != nil {
		t.Errorf("a 1ns interval on a 1m lease: %v, want it raised to the floor", err)
	}
	if n := k.Len(); n != 1 {
		t.Errorf("keeper renews %d locks, want 1", n)
	}
}

// TestKeeperDeadConnectionDoesNotHoldOthers: a round whose request was lost on a connection that
// never answers (a partition that dropped it, then healed) waits for most of its lock's lease.
// Redis answers again meanwhile, so locks falling due must go out on another connection instead
// of waiting behind it and being lost.
func TestKeeperDeadConnectionDoesNotHoldOthers(t *testing.T) {
	c, p, _ := proxied(t)
	rec := newLostRecorder()
	var renewed renewCounter
	var mu sync.Mutex
	risky := map[*Lock]bool{}
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: renewed.onRenew, OnAtRisk: func(l *Lock, _ error) {
		mu.Lock()
		defer mu.Unlock()
		risky[l] = true
	}})
	defer k.Stop()

	long := mustAcquire(t, c, uniqueKey(t), 6*time.Second)
	short := mustAcquire(t, c, uniqueKey(t), 2*time.Second)
	p.Blackhole()
	if err := k.Add(long, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the long lock's renewal lost in the partition", func() bool { return p.Dropped() > 0 })
	p.Pass()
	if err := k.Add(short, 0); err != nil {
		t.Fatal(err)
	}

	// The long lock's own round waits on the dead connection until its budget ends, then it is
	// renewed on a new one: it may be reported at risk meanwhile, but not lost.
	eventually(t, 15*time.Second, "three renewals of the short lock and one of the long, or a loss", func() bool {
		return rec.count() > 0 || (renewed.each([]*Lock{short}, 3) && renewed.each([]*Lock{long}, 1))
	})
	rec.noLoss(t)
	mu.Lock()
	defer mu.Unlock()
	if risky[short] {
		t.Error("the short lock was reported at risk although Redis renewed it on time")
	}
}
