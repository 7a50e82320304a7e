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
	type seen struct {
		parent int32 // index of the state this one was first reached from; -1 for init
		label  string
		depth  int32
	}
	index := map[S]int32{init: 0}
	states := []S{init}
	info := []seen{{parent: -1}}
	var res Result
	trail := func(i int32) []string {
		var out []string
		for ; info[i].parent >= 0; i = info[i].parent {
			out = append(out, info[i].label)
		}
		for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
			out[l], out[r] = out[r], out[l]
		}
		return out
	}
	for i := int32(0); int(i) < len(states); i++ {
		s := states[i]
		if p := check(s); p != "" {
			res.States = len(states)
			return res, &Violation{Property: p, Trail: trail(i)}, nil
		}
		res.Depth = max(res.Depth, int(info[i].depth))
		for _, st := range next(s) {
			res.Transitions++
			if _, ok := index[st.Next]; ok {
				continue
			}
			if len(states) >= limit {
				res.States = len(states)
				return res, nil, fmt.Errorf("more than %d states: the model outgrew its bounds", limit)
			}
			index[st.Next] = int32(len(states))
			states = append(states, st.Next)
			info = append(info, seen{parent: i, label: st.Label, depth: info[i].depth + 1})
		}
	}
	res.States = len(states)
	return res, nil, nil
}
