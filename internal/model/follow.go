package model

import (
	"fmt"
	"strings"
)

// Trace validation (issue 25, part 4): the implementation is held to the model by checking that
// what one of its runs was seen to do is a run of the model. The caller maps the run's events to
// the model's step labels; steps nobody can see (a validity that ends, a clock tick, an expiry in
// Redis) are hidden and may be taken anywhere in between.

// MaxStreams is how many streams of events Follow takes: one per process seen.
const MaxStreams = 8

// Refusal is a trace the model cannot follow: the most events a run of the model takes, and what
// was left at the head of each stream, and offered by the model, at the furthest such run.
type Refusal struct {
	Matched int      // events taken, over all streams
	Heads   []string // the next event of each stream not yet done, at the furthest run
	Offered []string // the observable labels the model offered there instead
	Trail   []string // that run of the model, hidden steps included
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("the model takes %d events of the trace, then none of %s; it offers %s; after\n  %s",
		r.Matched, strings.Join(r.Heads, " | "), strings.Join(r.Offered, " | "), strings.Join(r.Trail, "\n  "))
}

// Follow reports whether streams, the events each process of a run was seen to take (each stream
// in its own order; how the streams interleaved is not known), are a run of the model: a path from
// init whose observable steps (observable(label) true) each take the next event of some stream
// that matches it (match), until every stream is done, with any number of hidden steps before,
// between and after. It searches breadth first over a model state and a place in each stream, so
// it visits only what some interleaving of the streams allows, and returns nil when a path takes
// every event, else the Refusal of a run that took the most. limit bounds the places visited: a
// search that would pass it is an error, never a pass.
func Follow[S comparable, E any](init S, next func(S) []Step[S], observable func(label string) bool,
	streams [][]E, match func(label string, e E) bool, limit int) (*Refusal, error) {
	if len(streams) > MaxStreams {
		return nil, fmt.Errorf("%d streams; Follow takes at most %d", len(streams), MaxStreams)
	}
	type place struct {
		s   S
		pos [MaxStreams]int32
	}
	type from struct {
		parent int32
		label  string
	}
	taken := func(p place) (n int) {
		for _, k := range p.pos {
			n += int(k)
		}
		return n
	}
	total := 0
	for _, s := range streams {
		total += len(s)
	}
	start := place{s: init}
	index := map[place]int32{start: 0}
	places, how := []place{start}, []from{{parent: -1}}
	furthest := int32(0)
	for i := int32(0); int(i) < len(places); i++ {
		p := places[i]
		if taken(p) == total {
			return nil, nil
		}
		if taken(p) > taken(places[furthest]) {
			furthest = i
		}
		for _, st := range next(p.s) {
			var tos []place
			if !observable(st.Label) {
				tos = append(tos, place{st.Next, p.pos})
			} else {
				for k, s := range streams {
					if int(p.pos[k]) < len(s) && match(st.Label, s[p.pos[k]]) {
						to := place{st.Next, p.pos}
						to.pos[k]++
						tos = append(tos, to)
					}
				}
			}
			for _, to := range tos {
				if _, ok := index[to]; ok {
					continue
				}
				if len(places) >= limit {
					return nil, fmt.Errorf("more than %d places while following the trace: the model outgrew its bounds", limit)
				}
				index[to] = int32(len(places))
				places = append(places, to)
				how = append(how, from{parent: i, label: st.Label})
			}
		}
	}
	f := places[furthest]
	r := &Refusal{Matched: taken(f)}
	for k, s := range streams {
		if int(f.pos[k]) < len(s) {
			r.Heads = append(r.Heads, fmt.Sprint(s[f.pos[k]]))
		}
	}
	for _, st := range next(f.s) {
		if observable(st.Label) {
			r.Offered = append(r.Offered, st.Label)
		}
	}
	for j := furthest; how[j].parent >= 0; j = how[j].parent {
		r.Trail = append([]string{how[j].label}, r.Trail...)
	}
	return r, nil
}
