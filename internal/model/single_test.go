package model

import (
	"strings"
	"testing"
)

// stateLimit bounds every exploration here; the models stay far below it.
const stateLimit = 5_000_000

// expect explores a model and checks its verdict: want "" for no reachable violation, else the
// property (its letter) the checker must find.
func expect[S comparable](t *testing.T, init S, next func(S) []Step[S], check func(S) string, want string) {
	t.Helper()
	res, v, err := Explore(init, next, check, stateLimit)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case want == "" && v != nil:
		t.Fatalf("%v", v)
	case want == "" && v == nil:
		t.Logf("no violation in %d states, %d transitions, depth %d", res.States, res.Transitions, res.Depth)
	case v == nil:
		t.Fatalf("property %s holds in all %d states; the checker was to find its violation", want, res.States)
	case !strings.HasPrefix(v.Property, want+":"):
		t.Fatalf("want a violation of %s, got %v", want, v)
	default:
		t.Logf("found after %d states: %v", res.States, v)
	}
}

var singleBounds = SingleConfig{Attempts: 2, Ticks: 1, FailoverTicks: 5}

func TestSingleAsBuilt(t *testing.T) {
	t.Run("assumptions hold: a, b and c", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(singleBounds), SingleCheck(true), "")
	})
	paused := singleBounds
	paused.Pause = true
	t.Run("a holder paused past its ttl: two holders", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(paused), SingleCheck(true), "a")
	})
	t.Run("a holder paused past its ttl: fences and the store still order them", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(paused), SingleCheck(false), "")
	})
	// One attempt each under a failover: the replica's copy multiplies the states tenfold, and
	// what a failover does to fences does not depend on retries (the mutations' trails show it).
	failover := singleBounds
	failover.Failover, failover.Attempts = true, 1
	t.Run("a failover that lost the lock: two holders", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(failover), SingleCheck(true), "a")
	})
	t.Run("a failover that lost the lock: fences and the store still order them", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(failover), SingleCheck(false), "")
	})
	failover.FailoverTicks = 0
	t.Run("a failover faster than the clock: the fence repeats", func(t *testing.T) {
		// The clock-skew assumption is needed: a new primary whose clock is not past the counter's
		// lost value hands out a fence again.
		expect(t, SingleInit(), SingleNext(failover), SingleCheck(false), "b")
	})
}

func TestSingleMutations(t *testing.T) {
	t.Run("undo without the grant mark", func(t *testing.T) {
		cfg := singleBounds
		cfg.Mutation = UndoWithoutGrantMark
		expect(t, SingleInit(), SingleNext(cfg), SingleCheck(true), "a")
	})
	t.Run("fence from the counter only", func(t *testing.T) {
		cfg := singleBounds
		cfg.Failover, cfg.Attempts, cfg.Mutation = true, 1, FenceFromCounterOnly
		expect(t, SingleInit(), SingleNext(cfg), SingleCheck(false), "b")
	})
}

func TestSingleReadoptionWithWaitReplicas(t *testing.T) {
	cfg := SingleConfig{Attempts: 2, Ticks: 1, Readopt: true, WaitReplicas: true}
	t.Run("as built: a, b and c", func(t *testing.T) {
		expect(t, SingleInit(), SingleNext(cfg), SingleCheck(true), "")
	})
	t.Run("mutation: a shortfall undoes the re-adoption", func(t *testing.T) {
		m := cfg
		m.Mutation = ShortfallUndoesReadoption
		expect(t, SingleInit(), SingleNext(m), SingleCheck(true), "a")
	})
}
