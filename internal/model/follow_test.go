package model

import (
	"regexp"
	"strings"
	"testing"
)

// TestFollowTakesHiddenStepsBetweenEvents: in the toy model with only a+1 seen, three a+1 are a
// run (b+1 taken anywhere, unseen), a fourth is not, and the refusal says how far it got.
func TestFollowTakesHiddenStepsBetweenEvents(t *testing.T) {
	seenA := func(l string) bool { return l == "a+1" }
	same := func(l, e string) bool { return l == e }
	one := func(events ...string) [][]string { return [][]string{events} }
	if r, err := Follow(counter{}, counterNext, seenA, one("a+1", "a+1", "a+1"), same, 100); err != nil || r != nil {
		t.Fatalf("three a+1: %v %v", r, err)
	}
	r, err := Follow(counter{}, counterNext, seenA, one("a+1", "a+1", "a+1", "a+1"), same, 100)
	if err != nil || r == nil || r.Matched != 3 || len(r.Heads) != 1 || r.Heads[0] != "a+1" {
		t.Fatalf("four a+1: want a refusal after 3, got %+v %v", r, err)
	}
	if _, err := Follow(counter{}, counterNext, seenA, one("a+1", "a+1"), same, 2); err == nil {
		t.Fatal("a search cut at its limit passed")
	}
}

// TestFollowInterleavesStreams: two streams whose interleaving is unknown are a run when some
// interleaving is one: a+1 and b+1 seen by two processes, three each, in any order; a stream with
// a fourth b+1 is not.
func TestFollowInterleavesStreams(t *testing.T) {
	all := func(string) bool { return true }
	same := func(l, e string) bool { return l == e }
	streams := [][]string{{"a+1", "a+1", "a+1"}, {"b+1", "b+1", "b+1"}}
	if r, err := Follow(counter{}, counterNext, all, streams, same, 100); err != nil || r != nil {
		t.Fatalf("two streams: %v %v", r, err)
	}
	streams[1] = append(streams[1], "b+1")
	r, err := Follow(counter{}, counterNext, all, streams, same, 100)
	if err != nil || r == nil || r.Matched != 6 || len(r.Heads) != 1 {
		t.Fatalf("a fourth b+1: want a refusal after 6 with one stream left, got %+v %v", r, err)
	}
}

// fenceDigits masks a fencing token in a label or an event, so a trace whose tokens are the
// implementation's (a hybrid clock's µs) matches the model's small ones.
var fenceDigits = regexp.MustCompile(`fence \d+`)

func sameUpToFences(label, event string) bool {
	return fenceDigits.ReplaceAllString(label, "fence N") == fenceDigits.ReplaceAllString(event, "fence N")
}

// singleSeen is what a recorder of the library can see: the clients' calls and their answers, and
// every script as Redis runs it (MONITOR); a validity that ends, the clock, an expiry and
// replication are hidden.
func singleSeen(label string) bool {
	for _, hidden := range []string{"validity", "clock", "expires", "replica"} {
		if strings.Contains(label, hidden) {
			return false
		}
	}
	return true
}

// TestFollowSingle: a handoff seen in the implementation (c1 acquires, writes, releases; c2
// acquires), with the implementation's tokens, is a run of the single-deployment model; a trace
// in which c1 writes with its fence after c2 was granted the lock is not, unless a holder may be
// paused past its ttl, which is the one fault that lets it happen.
func TestFollowSingle(t *testing.T) {
	handoff := []string{
		"c1 sends attempt 1", "acquire script of c1 attempt 1 runs", "c1 holds with fence 1733000000000001",
		"c1 writes to the store with fence 1733000000000001", "c1 releases",
		"c2 sends attempt 1", "acquire script of c2 attempt 1 runs", "c2 holds with fence 1733000000000002",
	}
	cfg := SingleConfig{Attempts: 1, Ticks: 1}
	if r, err := Follow(SingleInit(), SingleNext(cfg), singleSeen, [][]string{handoff}, sameUpToFences, 1_000_000); err != nil || r != nil {
		t.Fatalf("a handoff: %v %v", r, err)
	}
	late := []string{
		"c1 sends attempt 1", "acquire script of c1 attempt 1 runs", "c1 holds with fence 1733000000000001",
		"c2 sends attempt 1", "acquire script of c2 attempt 1 runs", "c2 holds with fence 1733000000000002",
		"c1 writes to the store with fence 1733000000000001",
	}
	r, err := Follow(SingleInit(), SingleNext(cfg), singleSeen, [][]string{late}, sameUpToFences, 1_000_000)
	if err != nil || r == nil || r.Matched != 6 {
		t.Fatalf("a write after the next grant, no pause: want a refusal after 6 events, got %+v %v", r, err)
	}
	t.Logf("refused as it should be: %v", r)
	cfg.Pause = true
	if r, err := Follow(SingleInit(), SingleNext(cfg), singleSeen, [][]string{late}, sameUpToFences, 1_000_000); err != nil || r != nil {
		t.Fatalf("the same with a pause past the ttl allowed: %v %v", r, err)
	}
}
