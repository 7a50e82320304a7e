package guard

import (
	"testing"
	"time"
)

// TestConfigDefaults: the waiters' backoff takes its defaults, and a maximum given alone
// (--wait-backoff-max below the default minimum) bounds the minimum rather than being raised.
func TestConfigDefaults(t *testing.T) {
	s := time.Second
	for _, tc := range []struct{ min, max, wantMin, wantMax time.Duration }{
		{0, 0, s, 15 * s},
		{0, 250 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond},
		{0, 2 * s, s, 2 * s},
		{30 * s, 30 * s, 30 * s, 30 * s},
		{30 * s, 0, 30 * s, 30 * s},
		{2 * s, s, s, s},
	} {
		c := Config{WaitBackoffMin: tc.min, WaitBackoffMax: tc.max}
		c.Defaults()
		if c.WaitBackoffMin != tc.wantMin || c.WaitBackoffMax != tc.wantMax {
			t.Errorf("min %s, max %s: got %s..%s, want %s..%s", tc.min, tc.max, c.WaitBackoffMin, c.WaitBackoffMax, tc.wantMin, tc.wantMax)
		}
	}
}
