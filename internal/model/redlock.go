package model

import "fmt"

// The Redlock model: three independent nodes, each with its own lock key and fence counter, and two
// clients that each make one Acquire of one lock (up to two attempts) on a majority of them, hold
// it, and release it. Its atomic steps are one node's script: acquire.lua with the grant mark and a
// proposed token (a node hands out max(counter + 1, proposal) and keeps it as its counter),
// undo.lua (late, on a node that did not answer), fence.lua's raise, release.lua; and a client's
// decision on an attempt's replies, which it may take at any time, with replies still missing (a
// node timed out: its script may run later, so a failed attempt is undone there late).
//
// Abstracted: no expiry and no clock (leases outlast the model; the server clock's term in the
// fence is one more lower bound, as the proposal is); no node loses its data (Redlock's own
// assumption). A proposal is any of Config.Proposals, so every relation between proposals and
// counters is explored, whatever the clocks say. Steps that touch only nodes the client holds, or
// whose order among nodes no other client can observe, are one step each: the write-back to the
// granting nodes, the undo of a failed attempt's grants on the nodes that answered (the library
// makes it before it returns), and the release of every node.

// RedlockMutation puts back one defect, for the mutation check.
type RedlockMutation int8

const (
	// RedlockAsBuilt is the protocol as built.
	RedlockAsBuilt RedlockMutation = iota
	// SkipWriteBack: the highest token is never written back to the granting nodes, as if every
	// quorum agreed on it.
	SkipWriteBack
	// RedlockUndoWithoutGrantMark: a late undo deletes the lock when it holds the caller's token,
	// not only this attempt's grant mark.
	RedlockUndoWithoutGrantMark
	// ProposalOverridesCounter: a node hands out the proposal when there is one, rather than the
	// larger of it and counter + 1.
	ProposalOverridesCounter
)

// RedlockConfig bounds the Redlock model.
type RedlockConfig struct {
	Attempts  [2]int // per client
	Proposals []int8 // the tokens an attempt may propose; 0 proposes none
	Counters  [3]int8
	Mutation  RedlockMutation
}

const rlNodes, rlQuorum = 3, 2

type rlNode struct {
	owner, mark int8 // as lockValue
	counter     int8
}

type rlClient struct {
	pc       phase
	attempt  int8
	proposal int8
	inflight [2]uint8 // per attempt, the nodes whose acquire script has not run
	undo     [2]uint8 // per attempt, the nodes whose undo script has not run
	reply    [rlNodes]int8
	fence    int8
}

// RedlockState is one state of the Redlock model.
type RedlockState struct {
	n          [rlNodes]rlNode
	c          [2]rlClient
	lastHolder int8
	broken     string
}

// RedlockInit is the model's initial state: every lock free, the counters as configured.
func RedlockInit(cfg RedlockConfig) RedlockState {
	var s RedlockState
	for i := range s.n {
		s.n[i].counter = cfg.Counters[i]
	}
	return s
}

const (
	rlBusy int8 = -1 // a reply: held by another; a granted reply is the fence (> 0); 0 is none yet
)

// RedlockNext returns the model's steps from s.
func RedlockNext(cfg RedlockConfig) func(RedlockState) []Step[RedlockState] {
	return func(s RedlockState) []Step[RedlockState] {
		if s.broken != "" {
			return nil
		}
		var out []Step[RedlockState]
		add := func(label string, n RedlockState) { out = append(out, Step[RedlockState]{label, n}) }
		for i := range s.c {
			id := int8(i + 1)
			c := s.c[i]
			switch c.pc {
			case idle:
				if int(c.attempt) >= cfg.Attempts[i] {
					break
				}
				for _, p := range cfg.Proposals {
					n := s
					nc := &n.c[i]
					nc.attempt++
					nc.proposal, nc.reply, nc.pc = p, [rlNodes]int8{}, waiting
					nc.inflight[nc.attempt-1] = 1<<rlNodes - 1
					add(fmt.Sprintf("c%d sends attempt %d proposing %d", id, nc.attempt, p), n)
				}
			case waiting:
				add(fmt.Sprintf("c%d decides on attempt %d's replies %v", id, c.attempt, c.reply), s.decide(cfg, i))
			case holding:
				n := s
				n.c[i].pc, n.c[i].fence = done, 0
				for node := range n.n {
					if n.n[node].owner == id {
						n.n[node].owner, n.n[node].mark = 0, 0 // release.lua
					}
				}
				add(fmt.Sprintf("c%d releases", id), n)
			}
			for k := int8(1); k <= c.attempt; k++ {
				for node := range rlNodes {
					if c.inflight[k-1]&(1<<node) != 0 {
						add(fmt.Sprintf("node %d runs c%d attempt %d's acquire", node, id, k), s.acquire(cfg.Mutation, i, k, node))
					}
					// The library repeats a late undo until the lease would have ended, so one that
					// matters runs after the late script it undoes; one that ran before did nothing.
					if c.undo[k-1]&(1<<node) != 0 && c.inflight[k-1]&(1<<node) == 0 {
						add(fmt.Sprintf("node %d runs c%d attempt %d's undo", node, id, k), s.runUndo(cfg, i, k, node))
					}
				}
			}
		}
		return out
	}
}

// acquire runs acquire.lua on node for client i's attempt k.
func (s RedlockState) acquire(mutation RedlockMutation, i int, k int8, node int) RedlockState {
	id := int8(i + 1)
	n := s
	c := &n.c[i]
	c.inflight[k-1] &^= 1 << node
	nd := &n.n[node]
	var r int8
	switch nd.owner {
	case 0:
		r = max(nd.counter+1, c.proposalFor(k))
		if p := c.proposalFor(k); p > 0 && mutation == ProposalOverridesCounter {
			r = p
		}
		nd.owner, nd.mark, nd.counter = id, k, r
	case id:
		nd.mark = 0 // re-adopted: the bare token
		r = nd.counter
	default:
		r = rlBusy
	}
	if c.pc == waiting && c.attempt == k {
		c.reply[node] = r
	}
	return n
}

// proposalFor is what attempt k proposed: the proposal of the attempt the client waits for. A script
// that runs after its attempt was decided carried a proposal the model no longer keeps (keeping it
// would multiply the states for nothing), so it proposes none: the lowest, which leaves the node's
// counter lowest and later tokens least raised, the harder case for (b).
func (c *rlClient) proposalFor(k int8) int8 {
	if c.pc == waiting && k == c.attempt {
		return c.proposal
	}
	return 0
}

// decide is the client's settleGrant on its attempt's replies so far.
func (s RedlockState) decide(cfg RedlockConfig, i int) RedlockState {
	id := int8(i + 1)
	n := s
	c := &n.c[i]
	k := c.attempt
	var granted, missing uint8
	var highest, atHighest int8
	for node, r := range c.reply {
		switch {
		case r > 0:
			granted |= 1 << node
			switch {
			case r > highest:
				highest, atHighest = r, 1
			case r == highest:
				atHighest++
			}
		case r == 0:
			missing |= 1 << node
		}
	}
	if popcount(granted) < rlQuorum {
		// Undo the grants at once (undo.lua removes only this attempt's fresh ones), and late
		// where no reply came.
		for node := range rlNodes {
			if granted&(1<<node) != 0 {
				n = n.runUndo(cfg, i, k, node)
			}
		}
		c = &n.c[i]
		c.undo[k-1] |= missing
		c.reply, c.proposal = [rlNodes]int8{}, 0 // decided: kept no longer
		c.pc = done
		if int(k) < cfg.Attempts[i] {
			c.pc = idle
		}
		return n
	}
	if atHighest < rlQuorum && cfg.Mutation != SkipWriteBack {
		for node := range rlNodes {
			if granted&(1<<node) != 0 && n.n[node].owner == id {
				n.n[node].counter = max(n.n[node].counter, highest) // fence.lua
			}
		}
	}
	// The replies still missing may grant late; the library undoes those nodes in the background
	// only when the attempt failed, and a late grant to a holder's attempt is its own lock.
	c.pc, c.fence = holding, highest
	c.reply, c.proposal = [rlNodes]int8{}, 0
	if highest <= s.lastHolder {
		n.broken = fmt.Sprintf("b: c%d holds fence %d, not above the earlier holder's %d", id, highest, s.lastHolder)
	}
	n.lastHolder = max(s.lastHolder, highest)
	return n
}

// runUndo runs undo.lua on node for client i's attempt k.
func (s RedlockState) runUndo(cfg RedlockConfig, i int, k int8, node int) RedlockState {
	id := int8(i + 1)
	n := s
	n.c[i].undo[k-1] &^= 1 << node
	nd := &n.n[node]
	if nd.owner == id && (nd.mark == k || cfg.Mutation == RedlockUndoWithoutGrantMark) {
		nd.owner, nd.mark = 0, 0
	}
	return n
}

func popcount(m uint8) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// RedlockCheck returns the property s breaks, or "": (a) two clients hold at once; (b) is checked
// as each client comes to hold, since holds do not overlap while (a) holds.
func RedlockCheck(s RedlockState) string {
	if s.c[0].pc == holding && s.c[1].pc == holding {
		return "a: two clients hold the lock at once"
	}
	return s.broken
}
