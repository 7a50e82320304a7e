package redislock

import "testing"

// TestALeaseUnderAMillisecondIsHeld: PTTL answers 0 for a key with less than a millisecond left,
// which a script still finds. Reporting it free let a caller ask a script to hand off a lock the
// script then found held (TestDequeueHandsAFreeLockToTheNewHead failed so under CPU load).
func TestALeaseUnderAMillisecondIsHeld(t *testing.T) {
	for _, tc := range []struct {
		pttl int64
		held bool
	}{{-2, false}, {-1, true}, {0, true}, {1, true}, {30_000, true}} {
		st := slotState([]any{tc.pttl, "holder", "7"})
		if st.Held != tc.held {
			t.Errorf("pttl %d: held %v, want %v", tc.pttl, st.Held, tc.held)
		}
		if st.Fence != 7 {
			t.Errorf("pttl %d: fence %d, want 7", tc.pttl, st.Fence)
		}
	}
	if st := slotState([]any{nil, false, false}); st.Held {
		t.Errorf("no pttl in the reply: held, want free")
	}
}
