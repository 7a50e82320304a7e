package model

import (
	"fmt"
	"strings"
)

// Step is one atomic transition of a model: what happened, and the state after it.
type Step[S comparable] struct {
	Label string
	Next  S
}

// Violation is a reachable state that breaks a property, with the steps that lead to it from the
// initial state: the counterexample.
type Violation struct {
	Property string
	Trail    []string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s violated after %d steps:\n  %s", v.Property, len(v.Trail), strings.Join(v.Trail, "\n  "))
}

// Result is what an exhaustive exploration saw.
type Result struct {
	States      int // distinct states reached
	Transitions int // steps taken, including those into states already seen
	Depth       int // the longest shortest path from the initial state
}

// Explore visits every state reachable from init through next, breadth first, and calls check on
// each. It stops at the first state check rejects and returns that state's trail (a shortest one,
// since the search is breadth first), or, when every reachable state passed, nil. check returns ""
// for a good state, else the name of the property broken. limit bounds the states visited, so a
// model that grew past its bounds fails loudly instead of exhausting memory; a result that hit it
// is an error, never a pass.
func Explore[S comparable](init S, next func(S) []Step[S], check func(S) string, limit int) (Result, *Violation, error) {
	g, v, err := explore(init, next, check, limit, false)
	return g.res, v, err
}

// ExploreLive is Explore that also checks a liveness property, named liveness: from every
// reachable state some path leads to a state where goal holds (AG EF goal). In a finite model that
// is what "goal is eventually reached" needs under strong fairness (a step enabled infinitely often
// is taken infinitely often): a fair run that avoided goal would pass infinitely often through some
// state, from which a path to goal starts, and fairness takes that path's steps one after another.
// A state with no step at all that is not a goal breaks it too (a deadlock). The violation's trail
// leads to a state from which goal cannot be reached any more.
func ExploreLive[S comparable](init S, next func(S) []Step[S], check func(S) string, goal func(S) bool, liveness string, limit int) (Result, *Violation, error) {
	g, v, err := explore(init, next, check, limit, true)
	if v != nil || err != nil {
		return g.res, v, err
	}
	// Backward from the goal states over the recorded steps: what is left unmarked cannot reach one.
	preds := make([][]int32, len(g.states))
	for from, tos := range g.succ {
		for _, to := range tos {
			preds[to] = append(preds[to], int32(from))
		}
	}
	reaches := make([]bool, len(g.states))
	var work []int32
	for i, s := range g.states {
		if goal(s) {
			reaches[i] = true
			work = append(work, int32(i))
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range preds[i] {
			if !reaches[p] {
				reaches[p] = true
				work = append(work, p)
			}
		}
	}
	for i := range g.states {
		if !reaches[i] {
			return g.res, &Violation{Property: liveness, Trail: g.trail(int32(i))}, nil
		}
	}
	return g.res, nil, nil
}

// graph is what explore saw: the states in the order first reached, how each was first reached,
// and, when asked for, every state's successors.
type graph[S comparable] struct {
	states []S
	info   []seen
	succ   [][]int32
	res    Result
}

type seen struct {
	parent int32 // index of the state this one was first reached from; -1 for init
	label  string
	depth  int32
}

// trail is the steps from the initial state to state i, the way the search first reached it.
func (g *graph[S]) trail(i int32) []string {
	var out []string
	for ; g.info[i].parent >= 0; i = g.info[i].parent {
		out = append(out, g.info[i].label)
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}

func explore[S comparable](init S, next func(S) []Step[S], check func(S) string, limit int, edges bool) (*graph[S], *Violation, error) {
	index := map[S]int32{init: 0}
	g := &graph[S]{states: []S{init}, info: []seen{{parent: -1}}}
	for i := int32(0); int(i) < len(g.states); i++ {
		s := g.states[i]
		if p := check(s); p != "" {
			g.res.States = len(g.states)
			return g, &Violation{Property: p, Trail: g.trail(i)}, nil
		}
		g.res.Depth = max(g.res.Depth, int(g.info[i].depth))
		var succ []int32
		for _, st := range next(s) {
			g.res.Transitions++
			j, ok := index[st.Next]
			if !ok {
				if len(g.states) >= limit {
					g.res.States = len(g.states)
					return g, nil, fmt.Errorf("more than %d states: the model outgrew its bounds", limit)
				}
				j = int32(len(g.states))
				index[st.Next] = j
				g.states = append(g.states, st.Next)
				g.info = append(g.info, seen{parent: i, label: st.Label, depth: g.info[i].depth + 1})
			}
			if edges {
				succ = append(succ, j)
			}
		}
		if edges {
			g.succ = append(g.succ, succ)
		}
	}
	g.res.States = len(g.states)
	return g, nil, nil
}
