package model

import (
	"slices"
	"testing"
)

// counter is a toy model: two counters, each step raises one of them up to 3.
type counter struct{ a, b int8 }

func counterNext(s counter) []Step[counter] {
	var out []Step[counter]
	if s.a < 3 {
		out = append(out, Step[counter]{"a+1", counter{s.a + 1, s.b}})
	}
	if s.b < 3 {
		out = append(out, Step[counter]{"b+1", counter{s.a, s.b + 1}})
	}
	return out
}

func TestExploreVisitsEveryStateOnce(t *testing.T) {
	res, v, err := Explore(counter{}, counterNext, func(counter) string { return "" }, 100)
	if err != nil || v != nil {
		t.Fatalf("%v %v", err, v)
	}
	if res.States != 16 || res.Transitions != 24 || res.Depth != 6 {
		t.Fatalf("got %+v, want 16 states, 24 transitions, depth 6", res)
	}
}

func TestExploreReturnsAShortestTrail(t *testing.T) {
	_, v, err := Explore(counter{}, counterNext, func(s counter) string {
		if s.a == 2 && s.b == 1 {
			return "toy: a=2, b=1"
		}
		return ""
	}, 100)
	if err != nil || v == nil {
		t.Fatalf("want a violation, got %v %v", err, v)
	}
	if len(v.Trail) != 3 || slices.Index(v.Trail, "b+1") < 0 {
		t.Fatalf("trail %v, want three steps with one b+1", v.Trail)
	}
}

func TestExploreRefusesToPassPastItsLimit(t *testing.T) {
	if _, _, err := Explore(counter{}, counterNext, func(counter) string { return "" }, 10); err == nil {
		t.Fatal("an exploration cut at its limit passed")
	}
}

// TestExploreLive: in the toy model every state reaches (3, 3); a goal that only (0, 0) meets
// cannot be reached again once a counter moved, and a model that stops short of its goal
// deadlocks.
func TestExploreLive(t *testing.T) {
	never := func(counter) string { return "" }
	if _, v, err := ExploreLive(counter{}, counterNext, never, func(s counter) bool { return s == counter{3, 3} }, "toy live", 100); err != nil || v != nil {
		t.Fatalf("(3, 3) is reachable from every state: %v %v", err, v)
	}
	_, v, err := ExploreLive(counter{}, counterNext, never, func(s counter) bool { return s == counter{} }, "toy live", 100)
	if err != nil || v == nil || v.Property != "toy live" || len(v.Trail) != 1 {
		t.Fatalf("want the state one step from (0, 0) reported, got %v %v", err, v)
	}
	stuck := func(s counter) []Step[counter] {
		if s.a == 0 {
			return []Step[counter]{{"a+1", counter{1, 0}}}
		}
		return nil
	}
	if _, v, err := ExploreLive(counter{}, stuck, never, func(s counter) bool { return s == counter{3, 3} }, "toy live", 100); err != nil || v == nil {
		t.Fatalf("a deadlock short of the goal passed: %v %v", err, v)
	}
}
