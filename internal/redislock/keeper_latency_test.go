package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/testutil/faultproxy"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// latencyOneWay is what the tests of issue 23 (defect 7) add each way between the lock client and
// Redis: 600ms round trips.
const latencyOneWay = 300 * time.Millisecond

// withoutIdentity gives the lock client the option the Keeper's doc recommends and the operator sets
// (cmd/manager/redis.go): a fresh connection then costs one round trip (HELLO) before its first
// command, not two.
func withoutIdentity(o *redis.Options) { o.DisableIdentity = true }

// keeperLog records what a keeper reports, for tests in which a healthy lock must hear nothing but
// renewals.
type keeperLog struct {
	mu      sync.Mutex
	reports []string // OnAtRisk, OnLost and OnShortLease calls, in order
	short   map[*Lock]error
	renewed map[*Lock]int
	// slowest is the longest a successful renewal took, from its send (the lease's new start) to
	// its OnRenew: the test's evidence that the latency was in force.
	slowest time.Duration
}

func (g *keeperLog) options() KeeperOptions {
	report := func(what string) func(*Lock, error) {
		return func(l *Lock, err error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.reports = append(g.reports, fmt.Sprintf("%s %s: %v", what, l.Key(), err))
			if what == "short lease" {
				if g.short == nil {
					g.short = map[*Lock]error{}
				}
				g.short[l] = err
			}
		}
	}
	return KeeperOptions{
		OnLost:       report("lost"),
		OnAtRisk:     report("at risk"),
		OnShortLease: report("short lease"),
		OnRenew: func(l *Lock, err error) {
			if err != nil {
				return
			}
			took := time.Since(l.LeaseStart())
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.renewed == nil {
				g.renewed = map[*Lock]int{}
			}
			g.renewed[l]++
			g.slowest = max(g.slowest, took)
		},
	}
}

func (g *keeperLog) reported() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.reports) > 0
}

func (g *keeperLog) renewals(l *Lock) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewed[l]
}

// keepsThroughLeases waits until the keeper has carried l through n leases from now (its lease then
// started n ttls later) and fails the test if the keeper reported anything but renewals meanwhile,
// or if no renewal took a round trip of the latency.
func (g *keeperLog) keepsThroughLeases(t *testing.T, l *Lock, n int) {
	t.Helper()
	ttl := l.LeaseTTL()
	until := time.Now().Add(time.Duration(n) * ttl)
	eventually(t, time.Duration(n+2)*ttl, fmt.Sprintf("%d leases of %s, or a report", n, l.Key()), func() bool {
		return g.reported() || !l.LeaseStart().Before(until)
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.reports {
		t.Errorf("keeper reported %s", r)
	}
	if !l.Held() {
		t.Errorf("%s not held", l.Key())
	}
	t.Logf("%d renewals of %s, the slowest answered in %v", g.renewed[l], l.Key(), g.slowest)
	if len(g.reports) == 0 && g.slowest < 2*latencyOneWay {
		t.Errorf("the slowest renewal took %v, less than the latency's round trip %v: the fault was not in force", g.slowest, 2*latencyOneWay)
	}
}

// TestKeeperKeepsALockAcquiredBeforeLatency (issue 23, defect 7): 600ms round trips set in after the
// lock (3s lease, default interval and margin) was acquired and given to a keeper that has not
// renewed anything yet, and Redis answers every call. The keeper's first round opens a connection
// (go-redis dials pipeline connections only when a pipeline needs one): HELLO, then the renewal,
// 1.2s. Sent a third of the lease after the acquisition, its answer came 230ms into the at-risk
// margin, and a healthy lock was reported at risk. Through two leases under the latency it must be
// neither at risk nor lost.
func TestKeeperKeepsALockAcquiredBeforeLatency(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	const ttl = 3 * time.Second
	var g keeperLog
	k := c.NewKeeper(g.options())
	defer k.Stop()
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	p.Delay(latencyOneWay)
	g.keepsThroughLeases(t, l, 2)
}

// TestKeeperKeepsALockAcquiredDuringLatency (issue 23, defect 7): as above, but the lock is acquired
// under the 600ms round trips, as an operator that has been running acquires one: its connection
// open, the scripts loaded in Redis. The lease counts from when the acquire was sent, so the keeper
// gets it with a round trip of it spent; and the keeper has no connection of its own yet, as after
// a start or a blip that reset them. Neither at risk nor lost through two leases.
func TestKeeperKeepsALockAcquiredDuringLatency(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	const ttl = 3 * time.Second
	// An acquire and a release load their scripts and leave a connection in the client's pool.
	if err := mustAcquire(t, c, uniqueKey(t), ttl).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var g keeperLog
	k := c.NewKeeper(g.options())
	defer k.Stop()
	p.Delay(latencyOneWay)

	sent := time.Now()
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if took := time.Since(sent); took < 2*latencyOneWay {
		t.Fatalf("acquire answered in %v, less than the latency's round trip", took)
	}
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	g.keepsThroughLeases(t, l, 2)
}

// measureUnderLatency has k measure round trips under the proxy's latency with a lock of its own
// (renewed as often as its lease allows), then removes that lock, so the locks a test adds next find
// the keeper's connection open and its rounds to themselves.
func measureUnderLatency(t *testing.T, c *Client, k *Keeper, g *keeperLog, delay func()) {
	t.Helper()
	pilot := mustAcquire(t, c, uniqueKey(t), time.Minute)
	if err := k.Add(pilot, MinRenewInterval); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal of the pilot lock", func() bool { return g.renewals(pilot) > 0 })
	delay()
	// The first round that began under the latency may have begun before it: wait for two more.
	before := g.renewals(pilot)
	eventually(t, 10*time.Second, "two renewals of the pilot lock under the latency", func() bool { return g.renewals(pilot) >= before+2 })
	k.Remove(pilot)
	if rtt := k.RoundTrip(); rtt < 2*latencyOneWay {
		t.Fatalf("keeper measured round trips of %v under a latency of %v each way", rtt, latencyOneWay)
	}
}

// TestKeeperRenewsEarlyForItsMarginAt600msRTT: a keeper that measured 600ms round trips renews a lock
// early enough for its at-risk margin. A 3.3s lease renewed every 1.98s, with 1s of margin, leaves
// about 290ms between the renewal and the margin (the drift takes 33ms), less than a round trip: a
// renewal at the interval would be answered some 310ms into the margin, so it must go out sooner.
// The lease leaves room for round trips of up to 756ms (three of them must fit before the margin,
// else the keeper reports the lease too short), so a loaded machine's slower answers still fit.
func TestKeeperRenewsEarlyForItsMarginAt600msRTT(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	const ttl = 3300 * time.Millisecond
	var g keeperLog
	opts := g.options()
	opts.AtRiskMargin = time.Second
	k := c.NewKeeper(opts)
	defer k.Stop()
	measureUnderLatency(t, c, k, &g, func() { p.Delay(latencyOneWay) })

	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, ttl*6/10); err != nil {
		t.Fatal(err)
	}
	g.keepsThroughLeases(t, l, 2)
}

// TestKeeperReportsALeaseTooShortForItsRoundTrip: a lock whose lease cannot hold three of the
// round trips the keeper measured, beyond its drift and margin, is reported once through
// OnShortLease, and a lock with a lease long enough is not.
func TestKeeperReportsALeaseTooShortForItsRoundTrip(t *testing.T) {
	const oneWay = 100 * time.Millisecond
	c, p, _ := proxied(t, withoutIdentity)
	var g keeperLog
	k := c.NewKeeper(g.options())
	defer k.Stop()
	pilot := mustAcquire(t, c, uniqueKey(t), time.Minute)
	if err := k.Add(pilot, MinRenewInterval); err != nil {
		t.Fatal(err)
	}
	p.Delay(oneWay)
	eventually(t, 10*time.Second, "a round trip measured under the latency", func() bool { return k.RoundTrip() >= 2*oneWay })
	rtt := k.RoundTrip()
	floor := c.MinTTL(rtt)
	t.Logf("round trips of %v need leases of %v", rtt, floor)

	// 800ms leave 800 − 8 − 266 = 526ms before the margin, less than 3 × 200ms.
	short := mustAcquire(t, c, uniqueKey(t), 800*time.Millisecond)
	enough := mustAcquire(t, c, uniqueKey(t), 2*floor)
	if short.LeaseTTL() >= floor {
		t.Fatalf("MinTTL(%v) = %v, want more than the short lease %v", rtt, floor, short.LeaseTTL())
	}
	for _, l := range []*Lock{short, enough} {
		if err := k.Add(l, 0); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "a report of the short lease and two renewals of the long enough one", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.short[short] != nil && g.renewed[enough] >= 2
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.short[short]; !errors.Is(err, ErrLeaseTooShort) {
		t.Errorf("short lease reported with %v, want ErrLeaseTooShort", err)
	} else {
		t.Logf("reported: %v", err)
	}
	for _, l := range []*Lock{enough, pilot} {
		if err, ok := g.short[l]; ok {
			t.Errorf("%s (lease %v) reported short: %v", l.Key(), l.LeaseTTL(), err)
		}
	}
}

// TestKeeperStillReportsAnUnresponsiveRedisUnderLatency: renewing early for slow round trips does
// not hide a Redis that stops answering. After the keeper measured 600ms round trips and renewed a
// 3s lock, a blackhole must bring OnAtRisk once the margin starts and OnLost at ValidUntil.
func TestKeeperStillReportsAnUnresponsiveRedisUnderLatency(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	const ttl = 3 * time.Second
	var g keeperLog
	lost, risk := newLostRecorder(), newRiskRecorder()
	opts := g.options()
	opts.OnLost, opts.OnAtRisk = lost.onLost, risk.onAtRisk
	k := c.NewKeeper(opts)
	defer k.Stop()
	measureUnderLatency(t, c, k, &g, func() { p.Delay(latencyOneWay) })

	l := mustAcquire(t, c, uniqueKey(t), ttl)
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*ttl, "a renewal of the lock under the latency", func() bool { return g.renewals(l) > 0 })
	p.Blackhole()
	validUntil := l.ValidUntil()
	margin := ttl / 3

	riskAt, cause := risk.wait(t, 2*ttl)
	t.Logf("OnAtRisk %v before ValidUntil: %v", validUntil.Sub(riskAt), cause)
	if early := validUntil.Sub(riskAt); early <= 0 || early > margin {
		t.Errorf("OnAtRisk %v before ValidUntil, want within the margin (0, %v]", early, margin)
	}
	got, lostAt, err := lost.wait(t, 2*ttl)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v lost with %v, want our lock with ErrLockLost", got.Key(), err)
	}
	if late := lostAt.Sub(validUntil); late < 0 || late > lossBound {
		t.Errorf("OnLost %v after ValidUntil, want within [0, %v]", late, lossBound)
	}
	if n := risk.calls(); n != 1 {
		t.Errorf("OnAtRisk called %d times, want once", n)
	}
}

// lateLock acquires a 3s lock whose acquire is answered 2.1s after it was sent (1050ms each way
// through the proxy, on a connection opened and scripts loaded before), as an acquire that waited on
// a dead connection and was sent again after a Sentinel failover is: its lease counts from the
// first send, so less than its default at-risk margin (1s) is left when the caller gets it. The
// latency is gone when it returns.
func lateLock(t *testing.T, c *Client, p *faultproxy.Proxy) *Lock {
	t.Helper()
	const ttl = 3 * time.Second
	if err := mustAcquire(t, c, uniqueKey(t), ttl).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Delay(1050 * time.Millisecond)
	l := mustAcquire(t, c, uniqueKey(t), ttl)
	p.Delay(0)
	if left := time.Until(l.ValidUntil()); left >= ttl/3 {
		t.Fatalf("the late acquire left %v of its validity, not less than its margin %v", left, ttl/3)
	}
	return l
}

// TestKeeperRenewsALockAddedInsideItsMargin: a lock added to the keeper with less than its at-risk
// margin left, Redis answering at once, is renewed and never reported. It was reported at risk
// before its first renewal went out, with "renewal due but not sent yet", and the operator stopped
// a Job that had not started (the fault suite's sentinel-split-brain, where the acquire went out on
// the old master's connection and go-redis sent it again to the promoted replica).
func TestKeeperRenewsALockAddedInsideItsMargin(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	var g keeperLog
	k := c.NewKeeper(g.options())
	defer k.Stop()
	l := lateLock(t, c, p)
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal of "+l.Key()+", or a report", func() bool { return g.reported() || g.renewals(l) > 0 })
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.reports {
		t.Errorf("keeper reported %s", r)
	}
}

// TestKeeperReportsALateLockAtRiskWhenItsRenewalDoesNotCome: the wait for a late lock's first
// renewal ends in time. Redis stops answering as the lock is added: it is reported at risk before its
// validity ends, then lost at its end.
func TestKeeperReportsALateLockAtRiskWhenItsRenewalDoesNotCome(t *testing.T) {
	c, p, _ := proxied(t, withoutIdentity)
	var mu sync.Mutex
	reported := map[string]time.Time{}
	report := func(what string) func(*Lock, error) {
		return func(*Lock, error) {
			mu.Lock()
			defer mu.Unlock()
			reported[what] = time.Now()
		}
	}
	k := c.NewKeeper(KeeperOptions{OnAtRisk: report("at risk"), OnLost: report("lost")})
	defer k.Stop()
	l := lateLock(t, c, p)
	p.Blackhole()
	vu := l.ValidUntil()
	if err := k.Add(l, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the loss of "+l.Key(), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !reported["lost"].IsZero()
	})
	mu.Lock()
	defer mu.Unlock()
	atRisk, lost := reported["at risk"], reported["lost"]
	switch {
	case atRisk.IsZero():
		t.Errorf("lost at %v without being reported at risk", lost.Sub(vu))
	case !atRisk.Before(vu):
		t.Errorf("reported at risk %v after its validity ended", atRisk.Sub(vu))
	case lost.Before(vu):
		t.Errorf("reported lost %v before its validity ended", vu.Sub(lost))
	}
}
