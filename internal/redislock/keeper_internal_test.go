package redislock

import (
	"testing"
	"time"
)

// TestMinTTLIsTheKeepersFloor: the lease MinTTL returns is the shortest, to the millisecond, that
// the keeper does not report short at the default interval and margin: a millisecond less, it does.
func TestMinTTLIsTheKeepersFloor(t *testing.T) {
	// short is the keeper's check, with the interval and margin Add gives a lease of ttl by default.
	short := func(c *Client, ttl, rtt time.Duration) bool {
		interval := max(ttl/3, minInterval(ttl))
		margin := min(ttl/3, (ttl-interval)/2)
		return leaseTooShort(ttl, c.drift(ttl), margin, rtt)
	}
	for name, c := range map[string]*Client{
		"single node": {driftFactor: defaultDriftFactor},
		"redlock":     {driftFactor: defaultDriftFactor, driftAdd: 2 * time.Millisecond},
	} {
		for _, rtt := range []time.Duration{0, 40 * time.Millisecond, 100 * time.Millisecond, 600 * time.Millisecond, 1500 * time.Millisecond} {
			ttl := c.MinTTL(rtt)
			if short(c, ttl, rtt) {
				t.Errorf("%s: MinTTL(%v) = %v, which the keeper reports short", name, rtt, ttl)
			}
			// Below 300ms the default margin is less than a third of the lease, and MinTTL errs long.
			if ttl >= 300*time.Millisecond && !short(c, ttl-time.Millisecond, rtt) {
				t.Errorf("%s: MinTTL(%v) = %v, but a millisecond less is not short", name, rtt, ttl)
			}
		}
	}
	// The figure docs/design.md gives for 600ms round trips.
	if got, want := (&Client{driftFactor: defaultDriftFactor}).MinTTL(600*time.Millisecond), 2757*time.Millisecond; got != want {
		t.Errorf("MinTTL(600ms) = %v, want %v", got, want)
	}
}
