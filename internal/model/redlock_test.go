package model

import "testing"

// redlockBounds: node 1's counter ahead of the others (as after a partition); no proposal, or one
// above every counter; client 1 may retry once (two attempts each: over 25 million states).
var redlockBounds = RedlockConfig{Attempts: [2]int{2, 1}, Proposals: []int8{0, 6}, Counters: [3]int8{0, 3, 0}}

func TestRedlockAsBuilt(t *testing.T) {
	expect(t, RedlockInit(redlockBounds), RedlockNext(redlockBounds), RedlockCheck, "")
}

func TestRedlockMutations(t *testing.T) {
	for _, m := range []struct {
		name     string
		mutation RedlockMutation
		want     string
	}{
		{"the write-back skipped", SkipWriteBack, "b"},
		{"undo without the grant mark", RedlockUndoWithoutGrantMark, "a"},
		{"the proposal over the counter", ProposalOverridesCounter, "b"},
	} {
		t.Run(m.name, func(t *testing.T) {
			cfg := redlockBounds
			cfg.Mutation = m.mutation
			expect(t, RedlockInit(cfg), RedlockNext(cfg), RedlockCheck, m.want)
		})
	}
}
