package lockbook

import "testing"

// TestSlotsCount: the counts the cron's Skip, the view and the retire read of a lock's slots.
func TestSlotsCount(t *testing.T) {
	held := func(name string) State { return State{Held: true, Metadata: name} }
	for name, tc := range map[string]struct {
		slots     Slots
		inUse     int
		holder    string
		heldAbove bool
	}{
		"free lock":                      {Slots{{}}, 0, "", false},
		"plain lock, held":               {Slots{held("a")}, 1, "a", false},
		"semaphore, slots 1 and 2 held":  {Slots{{}, held("b"), held("c")}, 2, "b", true},
		"semaphore, only slot 0 held":    {Slots{held("a"), {}, {}}, 1, "a", false},
		"no slots (nothing read)":        {nil, 0, "", false},
		"a holder left above the number": {Slots{held("a"), {}, {}, held("d")}, 2, "a", true},
	} {
		if got := tc.slots.InUse(); got != tc.inUse {
			t.Errorf("%s: InUse = %d, want %d", name, got, tc.inUse)
		}
		if got := tc.slots.AHolder(); got != tc.holder {
			t.Errorf("%s: AHolder = %q, want %q", name, got, tc.holder)
		}
		if got := tc.slots.HeldAbove(0); got != tc.heldAbove {
			t.Errorf("%s: HeldAbove(0) = %v, want %v", name, got, tc.heldAbove)
		}
	}
}
