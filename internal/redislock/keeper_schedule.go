package redislock

import (
	"errors"
	"fmt"
	"math"
	"time"
)

const (
	// MinRenewInterval is the shortest renew interval a Keeper uses; Add raises shorter ones to it
	// (and to a hundredth of the lease). A lock renewed more often buys no safety and, batched with
	// other tenants' locks, would only load Redis and the keeper on their account.
	MinRenewInterval = 100 * time.Millisecond

	// rttSamples is how many of its latest rounds the keeper's round-trip estimate looks at. Few
	// enough that the estimate follows a change of latency within a few rounds, and an array small
	// enough to scan on every round.
	rttSamples = 16

	// timerSlack is what a renewal's budget allows for the keeper's own lateness: a timer that fires
	// late, a goroutine that waits for a core on a loaded machine.
	timerSlack = 10 * time.Millisecond
)

// ErrLeaseTooShort is what KeeperOptions.OnShortLease reports: the lease leaves too little time
// before its at-risk margin for renewals at the round trips the keeper measures.
var ErrLeaseTooShort = errors.New("redislock: lease too short for the round trip to Redis")

// rttWindow keeps the durations of the keeper's latest rounds. Its estimate is the longest of them:
// of 16 samples the 99th percentile is the largest, and a schedule that must not be late has
// nothing better to rely on. A slot not yet filled counts as zero.
type rttWindow struct {
	samples [rttSamples]time.Duration
	next    int
	max     time.Duration
}

func (w *rttWindow) add(d time.Duration) {
	w.samples[w.next] = d
	w.next = (w.next + 1) % len(w.samples)
	w.max = 0
	for _, s := range w.samples {
		w.max = max(w.max, s)
	}
}

// renewBudget is how long before the at-risk margin a renewal goes out, for round trips of rtt:
// the round trip, a quarter more for the jitter that 16 samples do not show, and the keeper's own
// lateness.
func renewBudget(rtt time.Duration) time.Duration {
	return rtt + rtt/4 + timerSlack
}

// minInterval is the shortest renew interval, and the shortest time between a lease's start and its
// next renewal, for a lease of ttl: one lock must not make the keeper spin on everyone's account.
func minInterval(ttl time.Duration) time.Duration {
	return max(MinRenewInterval, ttl/100)
}

// leaseNeeds is how much of a lease, beyond its drift allowance and at-risk margin, round trips of
// rtt take in the worst case the keeper plans for: the round trip that brought the lease (it counts
// from when its acquire or renew was sent), then a renewal on a fresh connection, whose handshake
// (HELLO) is one more round trip before the renewal's own. A renewal on a warm connection needs
// less (renewBudget), so a lease that holds this much also leaves the schedule its slack.
func leaseNeeds(rtt time.Duration) time.Duration {
	return 3*rtt + timerSlack
}

// leaseTooShort reports whether a lease of ttl, with drift and margin taken off, cannot hold what
// round trips of rtt need (leaseNeeds).
func leaseTooShort(ttl, drift, margin, rtt time.Duration) bool {
	return ttl-drift-margin < leaseNeeds(rtt)
}

// MinTTL returns the shortest lease a Keeper keeps clear of its at-risk margin, at the default
// renew interval and margin (a third of the lease each), when a round trip to Redis takes rtt:
//
//	ttl·(1 − driftFactor − 1/3) − driftAdd ≥ 3·rtt + 10ms
//
// The three round trips are the one that brought the lease (it counts from when its acquire or
// renew was sent), then a renewal that may have to open a connection: HELLO, then the renewal. With
// the default drift allowance that is about 4.57·rtt + 15ms: 2.76s for 600ms round trips. That is
// for a client whose fresh connection costs one round trip before its first command (HELLO:
// DisableIdentity, database 0, the connection dialled nearby or ahead); every further round trip of
// a connection's setup (CLIENT SETINFO, SELECT, TCP or TLS handshakes over the slow path) adds one
// rtt to the three. Keeper.RoundTrip is the keeper's measure of rtt. The bound is exact for leases
// of 300ms and more, and errs long below.
func (c *Client) MinTTL(rtt time.Duration) time.Duration {
	need := float64(leaseNeeds(rtt)+c.driftAdd) / (1 - c.driftFactor - 1.0/3)
	return time.Duration(math.Ceil(need/float64(time.Millisecond))) * time.Millisecond // what Redis keeps
}

// RoundTrip returns the keeper's estimate of a round's duration, from sending its renewals to
// settling their answers: the longest of its latest 16 rounds that every node answered, leaving
// out rounds that may have opened a connection (see Keeper). Zero until it has measured one.
func (k *Keeper) RoundTrip() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rtt.max
}

// measure takes what a finished round says about the way to Redis: how many connections the
// keeper's rounds have open, and how long a round takes. Only rounds that every node answered count,
// and not those that may have opened a connection: a handshake is paid once per connection, not per
// round, and a lock added while no connection is known open goes out at once (Add) instead of being
// budgeted for it. A transport error counts every connection lost, which at worst renews a few
// locks early.
func (k *Keeper) measure(r roundResult) {
	for _, t := range r.tallies {
		if len(t.errs) > 0 {
			k.conns = 0
			return
		}
	}
	if !r.cold {
		k.rtt.add(r.end.Sub(r.start))
	}
	k.conns = max(k.conns, r.conns)
}

// dueAfter is when the renewal of a lease that began at start and is valid until vu goes out: at
// the lock's interval, or earlier when an answer as slow as the keeper's recent rounds would then
// come inside the at-risk margin; never sooner than the shortest interval after start, so a lease
// too short for the round trip (OnShortLease) does not make the keeper spin.
func (k *Keeper) dueAfter(e *keeperEntry, start time.Time, ttl time.Duration, vu time.Time) time.Time {
	due := start.Add(e.interval)
	if latest := vu.Add(-e.margin - renewBudget(k.rtt.max)); latest.Before(due) {
		due = latest
		if floor := start.Add(minInterval(ttl)); due.Before(floor) {
			due = floor
		}
	}
	return due
}

// shortLease is the error OnShortLease gets for e's lease of ttl.
func (k *Keeper) shortLease(e *keeperEntry, ttl time.Duration) error {
	rtt := k.rtt.max
	left := ttl - k.c.drift(ttl) - e.margin
	return fmt.Errorf("%w: lock %s: a lease of %v leaves %v before its at-risk margin of %v, and round trips of %v need %v (the one that brought the lease, then a renewal on a fresh connection); at the default margin the lease needs %v",
		ErrLeaseTooShort, e.lock.key, ttl, left.Round(time.Millisecond), e.margin.Round(time.Millisecond),
		rtt.Round(time.Millisecond), leaseNeeds(rtt).Round(time.Millisecond), k.c.MinTTL(rtt))
}
