package redislock

import (
	"strconv"
	"sync/atomic"
	"time"
)

// A Redlock grant's fencing token is the highest that its nodes hand out, and a quorum of nodes must
// keep a counter at least that high, so that every later quorum, which overlaps it, hands out a
// higher one. Nodes that count on their own disagree (each has its own clock and counter), and the
// highest token then has to be written back to them: a second round trip before the lock can be
// used. So each attempt proposes a token to every node (the client's clock plus the lead below), and
// a node hands out the larger of its own next token and the proposal: when the proposal is ahead of
// every node, they all hand out the proposal, already keep it, and the write-back is skipped
// (settleFence). The proposal decides nothing about safety: a node's token is never below its own,
// and the write-back happens whenever fewer than a quorum agree on the highest token.

// fenceLeadSlack is how far ahead of the nodes' tokens a proposal aims: room for the time a request
// takes to reach a node and for small clock differences, so the proposal stays ahead of the next
// node clocks too. Tokens then run about this far ahead of the clock, which costs nothing.
const fenceLeadSlack = time.Millisecond

// maxProposal bounds a proposal below 2^53, where Lua's numbers (doubles) stop being exact: a
// client whose clock or lead went that far proposes nothing, and the nodes count on their own.
const maxProposal = 1<<53 - 1

// fenceLead is how far ahead of this client's clock, in µs, its Redlock nodes' tokens have been seen
// to run; proposals add fenceLeadSlack to it. It only grows: a lead larger than needed costs
// nothing. The zero value is ready: no lead seen yet.
type fenceLead struct{ us atomic.Int64 }

// propose sets the token attempt o proposes to its nodes.
func (l *fenceLead) propose(o *acquireOptions) {
	o.proposedAt = time.Now().UnixMicro()
	o.proposal, o.proposalArg = 0, nil
	if p := o.proposedAt + l.us.Load() + fenceLeadSlack.Microseconds(); p > 0 && p <= maxProposal {
		o.proposal, o.proposalArg = p, strconv.FormatInt(p, 10)
	}
}

// learn raises the lead after a grant whose highest token beat the proposal: the nodes' clocks or
// counters ran ahead of it, and the next proposal should be ahead of them again.
func (l *fenceLead) learn(o *acquireOptions, highest int64) {
	if o.proposalArg == nil || highest <= o.proposal {
		return
	}
	want := highest - o.proposedAt
	for {
		cur := l.us.Load()
		if want <= cur || l.us.CompareAndSwap(cur, want) {
			return
		}
	}
}
