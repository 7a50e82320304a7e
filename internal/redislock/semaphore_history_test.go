package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// holding is one entry of a semaphore's recorded history: a holder's slot and fence, from the
// moment its Acquire returned until just before it released. Every holder's real tenure contains
// its recorded one, so recorded overlaps that the checker refuses are real ones too.
type holding struct {
	worker     string
	slot       int
	fence      int64
	start, end time.Time
	// kept: a holder from before N was lowered to n, which keeps its slot, also one above n-1.
	kept bool
}

// checkHistory returns every way h breaks the promise of a semaphore of n permits: more than n
// holders at once, two holders of one slot at once, a slot outside 0..n-1 (but for a kept one), a
// fence that does not rise within a slot.
func checkHistory(h []holding, n int) []string {
	var bad []string
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(h))
	bySlot := map[int][]holding{}
	for _, e := range h {
		if e.slot < 0 || (e.slot >= n && !e.kept) {
			bad = append(bad, fmt.Sprintf("%s held slot %d, outside 0..%d", e.worker, e.slot, n-1))
		}
		edges = append(edges, edge{e.start, 1}, edge{e.end, -1})
		bySlot[e.slot] = append(bySlot[e.slot], e)
	}
	// At one instant, ends count before starts: a holder that ended as another began did not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	holders := 0
	for _, e := range edges {
		holders += e.delta
		if holders > n {
			bad = append(bad, fmt.Sprintf("%d holders at once at %s, more than %d", holders, e.at.Format(time.StampMicro), n))
		}
	}
	for slot, hs := range bySlot {
		slices.SortFunc(hs, func(a, b holding) int { return a.start.Compare(b.start) })
		for i := 1; i < len(hs); i++ {
			prev, cur := hs[i-1], hs[i]
			if cur.start.Before(prev.end) {
				bad = append(bad, fmt.Sprintf("slot %d: %s and %s held it at once", slot, prev.worker, cur.worker))
			}
			if cur.fence <= prev.fence {
				bad = append(bad, fmt.Sprintf("slot %d: fence %d of %s after %d of %s", slot, cur.fence, cur.worker, prev.fence, prev.worker))
			}
		}
	}
	return bad
}

// maxConcurrent is the most holders h had at once (for the report).
func maxConcurrent(h []holding) int {
	best := 0
	for _, a := range h {
		at := 0
		for _, b := range h {
			if !b.start.After(a.start) && b.end.After(a.start) {
				at++
			}
		}
		best = max(best, at)
	}
	return best
}

// contend makes workersPerClient goroutines on each client acquire key as a semaphore of n permits
// for rounds short holds each, and returns the history. The first plainWorkers workers of each
// client acquire without WithPermits, as a caller that does not know the lock is a semaphore.
// strict: every Acquire and Release must succeed (a broken script makes releases fail; its history
// is what counts).
func contend(t *testing.T, clients []*Client, key string, n, workersPerClient, plainWorkers, rounds int, queued, strict bool) []holding {
	t.Helper()
	var (
		mu      sync.Mutex
		history []holding
		wg      sync.WaitGroup
	)
	for ci, c := range clients {
		for w := range workersPerClient {
			worker := fmt.Sprintf("c%d-w%d", ci, w)
			wg.Go(func() {
				for range rounds {
					opts := []AcquireOption{WithRetry(ExponentialBackoff(time.Millisecond, 10*time.Millisecond))}
					if w >= plainWorkers {
						opts = append(opts, WithPermits(n))
					}
					if queued {
						opts = append(opts, WithQueue(worker, float64(time.Now().UnixNano()), 5*time.Second))
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					l, err := c.Acquire(ctx, key, 5*time.Second, opts...)
					if err != nil {
						cancel()
						t.Errorf("%s: Acquire: %v", worker, err)
						return
					}
					start := time.Now()
					time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond) // the holder's work
					end := time.Now()
					mu.Lock()
					history = append(history, holding{worker: worker, slot: l.Slot(), fence: l.Fence(), start: start, end: end})
					mu.Unlock()
					if err := l.Release(ctx); err != nil && (strict || !errors.Is(err, ErrNotHeld)) {
						t.Errorf("%s: Release: %v", worker, err)
					}
					cancel()
				}
			})
		}
	}
	wg.Wait()
	return history
}

// report logs what the checker saw, for the record of a run.
func report(t *testing.T, name string, h []holding, n int, bad []string) {
	t.Helper()
	perSlot := map[int]int{}
	workers := map[string]bool{}
	for _, e := range h {
		perSlot[e.slot]++
		workers[e.worker] = true
	}
	slots := make([]string, 0, len(perSlot))
	for s := range MaxPermits {
		if perSlot[s] > 0 {
			slots = append(slots, fmt.Sprintf("%d:%d", s, perSlot[s]))
		}
	}
	t.Logf("%s: N=%d, %d holdings by %d workers, at most %d at once, holdings per slot %s, %d violations",
		name, n, len(h), len(workers), maxConcurrent(h), strings.Join(slots, " "), len(bad))
	// One example of each kind of violation, with how often it occurred.
	kinds := []string{"holders at once", "held it at once", "outside", "fence"}
	for _, kind := range kinds {
		count, first := 0, ""
		for _, b := range bad {
			if strings.Contains(b, kind) {
				if count == 0 {
					first = b
				}
				count++
			}
		}
		if count > 0 {
			t.Logf("  %d× e.g. %s", count, first)
		}
	}
}

// keepAboveN makes key a semaphore whose N was just lowered to n (by SetPermits) under n holders
// that keep slots 1..n: slot 0 is free, yet nobody may be admitted. A caller that ignores the
// stored N (a plain script that does not divert) takes slot 0 at once. The holders release one by
// one during the run; the returned func waits for them and returns their holdings.
func keepAboveN(t *testing.T, c *Client, key string, n int) func() []holding {
	t.Helper()
	ctx := context.Background()
	locks := make([]*Lock, n+1)
	if err := c.SetPermits(ctx, key, n+1); err != nil {
		t.Fatal(err)
	}
	for i := range locks {
		locks[i] = mustAcquire(t, c, key, time.Minute, WithPermits(n+1), WithMetadata(fmt.Sprintf("kept-%d", i)))
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPermits(ctx, key, n); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kept := make([]holding, n)
	var wg sync.WaitGroup
	for i, l := range locks[1:] {
		wg.Go(func() {
			time.Sleep(time.Duration(i+1) * 20 * time.Millisecond) // the holder's work, as in contend
			kept[i] = holding{worker: fmt.Sprintf("kept-%d", l.Slot()), slot: l.Slot(), fence: l.Fence(), start: start, end: time.Now(), kept: true}
			if err := l.Release(ctx); err != nil {
				t.Errorf("kept-%d: Release: %v", l.Slot(), err)
			}
		})
	}
	return func() []holding {
		wg.Wait()
		return kept
	}
}

// TestSemaphoreExclusionHistory: three clients (as three operators would be), three workers each,
// contend for a semaphore of 3 in many short rounds, queued and not; the recorded history never
// has more than 3 holders, never two in one slot, and fences rise within each slot. Mixed: one
// worker of each client acquires without WithPermits, and the run starts with N just lowered to 3
// under 3 holders of slots 1..3 (see keepAboveN). The same runs with a broken acquire script, or
// plain scripts that do not divert to the semaphore's, make the checker fail, so it can.
func TestSemaphoreExclusionHistory(t *testing.T) {
	const n, workers, rounds = 3, 3, 40
	_, srv, _ := single(t)
	clients := make([]*Client, 3)
	for i := range clients {
		c, err := New(srv.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	for _, mixed := range []bool{false, true} {
		for _, queued := range []bool{true, false} {
			name := fmt.Sprintf("queued=%v", queued)
			if mixed {
				name = "mixed/" + name
			}
			t.Run(name, func(t *testing.T) {
				key := uniqueKey(t)
				plainWorkers, want := 0, len(clients)*workers*rounds
				kept := func() []holding { return nil }
				if mixed {
					plainWorkers, want = 1, want+n
					kept = keepAboveN(t, clients[0], key, n)
				} else {
					declare(t, clients[0], key, n)
				}
				h := contend(t, clients, key, n, workers, plainWorkers, rounds, queued, true)
				h = append(h, kept()...)
				bad := checkHistory(h, n)
				report(t, name, h, n, bad)
				if len(bad) > 0 {
					t.Fatalf("%d violations", len(bad))
				}
				if len(h) != want {
					t.Fatalf("%d holdings, want %d", len(h), want)
				}
				if maxConcurrent(h) < 2 {
					t.Fatalf("at most %d holders at once: the run did not contend", maxConcurrent(h))
				}
			})
		}
	}

	broken := map[string]func(string) string{
		// Takes slot 0 whether it is free or not.
		"no free check": func(src string) string {
			return strings.Replace(src, "free = lowestFree(values, n)", "free = 0", 1)
		},
		// Counts no holder, and takes any free slot.
		"no held count": func(src string) string {
			src = strings.Replace(src, "local held = heldCount(values)", "local held = 0", 1)
			return strings.Replace(src, "free = lowestFree(values, n)", "free = lowestFree(values, MAX_SLOTS)", 1)
		},
	}
	for name, edit := range broken {
		t.Run("broken="+name, func(t *testing.T) {
			ReplaceAcquireSlotsScript(t, edit)
			key := uniqueKey(t)
			declare(t, clients[0], key, n)
			h := contend(t, clients, key, n, workers, 0, rounds/4, true, false)
			bad := checkHistory(h, n)
			report(t, "broken="+name, h, n, bad)
			if len(bad) == 0 {
				t.Fatalf("the checker found nothing wrong with a broken script")
			}
		})
	}

	// Plain callers that do not divert take slot 0 while the kept holders fill the lowered N.
	t.Run("broken=no divert", func(t *testing.T) {
		RemoveDivert(t)
		key := uniqueKey(t)
		kept := keepAboveN(t, clients[0], key, n)
		h := contend(t, clients, key, n, workers, 1, rounds/4, false, false)
		h = append(h, kept()...)
		bad := checkHistory(h, n)
		report(t, "broken=no divert", h, n, bad)
		if len(bad) == 0 {
			t.Fatalf("the checker found nothing wrong with plain scripts that do not divert")
		}
	})
}

// TestCheckHistory: the checker refuses each kind of violation on a made-up history.
func TestCheckHistory(t *testing.T) {
	at := time.Now()
	ms := func(i int) time.Time { return at.Add(time.Duration(i) * time.Millisecond) }
	hold := func(w string, slot int, fence int64, from, to int) holding {
		return holding{worker: w, slot: slot, fence: fence, start: ms(from), end: ms(to)}
	}
	cases := map[string]struct {
		h    []holding
		want string
	}{
		"fine":            {[]holding{hold("a", 0, 1, 0, 5), hold("b", 1, 1, 1, 6), hold("c", 0, 2, 5, 9)}, ""},
		"too many":        {[]holding{hold("a", 0, 1, 0, 5), hold("b", 1, 1, 1, 6), hold("c", 2, 1, 2, 7)}, "3 holders at once"},
		"one slot twice":  {[]holding{hold("a", 0, 1, 0, 5), hold("b", 0, 2, 4, 6)}, "held it at once"},
		"fence went back": {[]holding{hold("a", 1, 5, 0, 5), hold("b", 1, 5, 6, 7)}, "fence 5 of b after 5"},
		"slot too high":   {[]holding{hold("a", 2, 1, 0, 5)}, "outside 0..1"},
		"kept above n":    {[]holding{{worker: "k", slot: 2, fence: 1, start: ms(0), end: ms(5), kept: true}, hold("a", 0, 1, 0, 5)}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			bad := checkHistory(tc.h, 2)
			switch {
			case tc.want == "" && len(bad) > 0:
				t.Fatalf("violations in a fine history: %v", bad)
			case tc.want != "" && !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tc.want) }):
				t.Fatalf("violations %v, want one saying %q", bad, tc.want)
			}
		})
	}
}
