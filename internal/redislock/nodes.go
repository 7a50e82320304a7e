package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

func (c *Client) unavailable(reachable int, errs []error) error {
	if len(c.nodes) == 1 {
		return errors.Join(errs...)
	}
	return fmt.Errorf("redislock: %d of %d nodes answered, quorum is %d: %w", reachable, len(c.nodes), c.quorum, errors.Join(errs...))
}

// isTimeout reports whether err left it open if the command reached the server: a refused
// connection did not send it, a timeout may have.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// tally counts the nodes that answered 1 (done), 0 (not ours) or failed.
type tally struct {
	ok, no int
	errs   []error
}

func tallyInts(replies []nodeReply) tally {
	var t tally
	for _, r := range replies {
		if r.err != nil {
			t.errs = append(t.errs, r.err)
			continue
		}
		if n, _ := r.val.(int64); n == 1 {
			t.ok++
		} else {
			t.no++
		}
	}
	return t
}

// nodeReply is what one node answered to one script call.
type nodeReply struct {
	val any
	err error
}

// onNodes runs call on the nodes whose indexes are in which (all nodes if which is nil) and returns
// their replies in the same order. A single node is called inline with the caller's context, so the
// common case costs no goroutine. Redlock nodes are called concurrently, each bounded by the node
// timeout; a node that has not answered by then counts as failed even if its client ignores context
// deadlines.
func (c *Client) onNodes(ctx context.Context, which []int, call func(ctx context.Context, n redis.UniversalClient) (any, error)) []nodeReply {
	return c.onNodesInto(ctx, which, nil, call)
}

// oneReply is room for a single node's reply on the caller's stack (see onNodesInto).
type oneReply [1]nodeReply

// onNodesInto is onNodes writing a single node's reply into buf when it has room (a oneReply of the
// caller's): Acquire and Release, the calls every lock makes, then allocate no reply slice.
func (c *Client) onNodesInto(ctx context.Context, which []int, buf []nodeReply,
	call func(ctx context.Context, n redis.UniversalClient) (any, error)) []nodeReply {
	if which == nil {
		which = c.all
	}
	if len(c.nodes) == 1 {
		replies := buf[:0]
		if cap(replies) < len(which) {
			replies = make([]nodeReply, 0, len(which))
		}
		replies = replies[:len(which)]
		for j, i := range which {
			v, err := call(ctx, c.nodes[i])
			if err != nil {
				err = &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: err}
			}
			replies[j] = nodeReply{val: v, err: err}
		}
		return replies
	}

	type indexed struct {
		j int
		nodeReply
	}
	// Buffered, so a straggler we stopped waiting for can still send and exit.
	ch := make(chan indexed, len(which))
	// One deadline serves every node of the fan-out: they start together. It is cancelled once we
	// stop waiting, by when it has passed for every node that did not answer.
	nctx, cancel := context.WithTimeout(ctx, c.nodeTimeout)
	defer cancel()
	for j, i := range which {
		go func() {
			v, err := call(nctx, c.nodes[i])
			ch <- indexed{j, nodeReply{v, err}}
		}()
	}

	replies := make([]nodeReply, len(which))
	answered := make([]bool, len(which))
	// A little grace past the per-node timeout lets a client that honours deadlines report its
	// own error; past it we stop waiting.
	deadline := time.NewTimer(c.nodeTimeout + c.nodeTimeout/2)
	defer deadline.Stop()
collect:
	for range which {
		select {
		case r := <-ch:
			replies[r.j], answered[r.j] = r.nodeReply, true
		case <-deadline.C:
			break collect
		}
	}
	for j, i := range which {
		if !answered[j] {
			replies[j].err = fmt.Errorf("no answer within %v: %w", c.nodeTimeout, context.DeadlineExceeded)
		}
		if replies[j].err != nil {
			replies[j].err = &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: replies[j].err}
		}
	}
	return replies
}

func nodeAddr(n redis.UniversalClient) string {
	if cl, ok := n.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("%T", n)
}

// Ping checks that enough nodes answer to acquire locks: the only node, or a Redlock majority.
func (c *Client) Ping(ctx context.Context) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return n.Ping(ctx).Result()
	})
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(replies)-len(errs) < c.quorum {
		return c.unavailable(len(replies)-len(errs), errs)
	}
	return nil
}
