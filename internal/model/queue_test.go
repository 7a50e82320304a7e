package model

import (
	"strings"
	"testing"
)

// expectLive explores the queue model with property (d) as well: want "" when a, b, c and d all
// hold, else the letter of the property the checker must find broken.
func expectLive(t *testing.T, cfg QueueConfig, want string) {
	t.Helper()
	res, v, err := ExploreLive(QueueInit(), QueueNext(cfg), QueueCheck, QueueDone(cfg.GiveUp),
		"d: a state from which some client that did not crash can no longer get the lock and end", stateLimit)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case want == "" && v != nil:
		t.Fatalf("%v", v)
	case want == "":
		t.Logf("a, b, c and d hold in %d states, %d transitions, depth %d", res.States, res.Transitions, res.Depth)
	case v == nil:
		t.Fatalf("every property holds in all %d states; the checker was to find %s broken", res.States, want)
	case !strings.HasPrefix(v.Property, want+":"):
		t.Fatalf("want a violation of %s, got %v", want, v)
	default:
		t.Logf("found after %d states: %v", res.States, v)
	}
}

func TestQueueAsBuilt(t *testing.T) {
	t.Run("no fault", func(t *testing.T) { expectLive(t, QueueConfig{Poll: true}, "") })
	t.Run("a client crashes", func(t *testing.T) { expectLive(t, QueueConfig{Poll: true, Crash: true}, "") })
	t.Run("the channel loses messages", func(t *testing.T) { expectLive(t, QueueConfig{Poll: true, LoseMessages: true}, "") })
	t.Run("waiters give up", func(t *testing.T) { expectLive(t, QueueConfig{Poll: true, GiveUp: true, Crash: true}, "") })
	// Nobody announces an expiry: a handed lease that ran out before its waiter was told, or the
	// lock of a holder that crashed, is found only by a waiter that asks again on its own.
	t.Run("without the backoff timer the queue can stall", func(t *testing.T) { expectLive(t, QueueConfig{}, "d") })
}

func TestQueueMutations(t *testing.T) {
	t.Run("a handoff message trusted", func(t *testing.T) {
		expectLive(t, QueueConfig{Poll: true, Mutation: TrustHandoffMessage}, "a")
	})
	t.Run("a release that does not compare the token", func(t *testing.T) {
		expectLive(t, QueueConfig{Poll: true, Mutation: ReleaseWithoutCompare}, "a")
	})
	t.Run("a handoff without the next fence", func(t *testing.T) {
		expectLive(t, QueueConfig{Poll: true, Mutation: HandoffWithoutFence}, "b")
	})
	t.Run("waiters without a liveness deadline", func(t *testing.T) {
		expectLive(t, QueueConfig{Poll: true, Crash: true, Mutation: PruneNothing}, "d")
	})
}
