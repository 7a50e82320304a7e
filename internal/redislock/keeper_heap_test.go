package redislock

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestKeeperHeapOrder drives both entry heaps through random inserts, moves and removals and checks
// after every step that each entry knows its position and the top is the earliest entry.
func TestKeeperHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	for _, byWatch := range []bool{false, true} {
		h := &entryHeap{byWatch: byWatch, epoch: base}
		in := map[*keeperEntry]bool{}
		var all []*keeperEntry
		for range 200 {
			all = append(all, &keeperEntry{dueIndex: -1, watchIndex: -1})
		}
		for step := range 20000 {
			e := all[rng.IntN(len(all))]
			if rng.IntN(3) == 0 {
				h.remove(e)
				delete(in, e)
			} else {
				at := base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
				e.due, e.watchAt = at, at
				h.set(e)
				in[e] = true
			}
			if len(h.es) != len(in) {
				t.Fatalf("step %d: heap holds %d entries, want %d", step, len(h.es), len(in))
			}
			for i, it := range h.es {
				if *h.index(it.e) != i || !in[it.e] || it.at != h.key(it.e) {
					t.Fatalf("step %d: entry at %d records position %d", step, i, *h.index(it.e))
				}
				if i > 0 && it.at < h.es[(i-1)/2].at {
					t.Fatalf("step %d: entry at %d is earlier than its parent", step, i)
				}
			}
			for x := range in {
				if h.key(x) < h.key(h.top()) {
					t.Fatalf("step %d: top is not the earliest entry", step)
				}
			}
			for _, x := range all {
				if !in[x] && *h.index(x) != -1 {
					t.Fatalf("step %d: removed entry keeps position %d", step, *h.index(x))
				}
			}
		}
	}
}
