package redislock

import (
	"context"
	"fmt"
)

// QueueState is a lock's queue seen from outside: how many waiters stand in it (live ones: a
// waiter whose process stopped keeping it does not count) and which is at its head.
type QueueState struct {
	Waiting int
	Head    string // the head's queue member; "" when nobody waits
}

// QueueState reads the queue of the lock named key in one call, for a view of the lock (who holds
// it comes from Inspect). Only a single deployment keeps one queue (see HandsOff); on Redlock it is
// refused.
func (c *Client) QueueState(ctx context.Context, key string) (QueueState, error) {
	if err := validateKey(key); err != nil {
		return QueueState{}, err
	}
	if !c.handsOff() {
		return QueueState{}, invalidf("queue state: Redlock nodes keep separate queues")
	}
	vals, err := runScript(ctx, c.nodes[0], scriptQueueState, c.keysFor(key, true).queueWaiters()).Slice()
	if err != nil {
		return QueueState{}, fmt.Errorf("queue state %s: %w", key, &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	if len(vals) != 2 {
		return QueueState{}, fmt.Errorf("queue state %s: unexpected reply %v", key, vals)
	}
	var st QueueState
	if n, ok := vals[0].(int64); ok {
		st.Waiting = int(n)
	}
	if head, ok := vals[1].(string); ok {
		st.Head = head
	}
	return st, nil
}
