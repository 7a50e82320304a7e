package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// TTL returns the lease left on the lock as Redis sees it (the shortest among a Redlock majority),
// or ErrNotHeld if it is no longer ours.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, ErrNotHeld
	}
	c := l.client
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptPTTL, l.keys[:1], l.token).Int64()
	})
	var ttls []time.Duration
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		if ms, _ := r.val.(int64); ms >= 0 {
			ttls = append(ttls, time.Duration(ms)*time.Millisecond)
		}
	}
	if len(ttls) >= c.quorum {
		// The lock lives as long as its quorum: the quorum-th longest lease.
		slices.Sort(ttls)
		slices.Reverse(ttls)
		return ttls[c.quorum-1], nil
	}
	if len(replies)-len(errs) >= c.quorum || len(errs) == 0 {
		return 0, fmt.Errorf("ttl %s: %w", l.key, ErrNotHeld)
	}
	return 0, fmt.Errorf("ttl %s: %w", l.key, c.unavailable(len(replies)-len(errs), errs))
}

// State is what anyone can learn about a lock without holding it.
type State struct {
	// Held reports whether someone holds the lock (on a majority of nodes for Redlock).
	Held bool
	// TTL is the lease left on the lock, if held.
	TTL time.Duration
	// Metadata is what the holder stored with WithMetadata, if held.
	Metadata string
	// Fence is the last fencing token handed out for this lock (0 if never).
	Fence int64
}

// Inspect reads a lock's state without acquiring it, e.g. for a waiter to show who blocks it.
// It never reveals the holder's token.
func (c *Client) Inspect(ctx context.Context, key string) (State, error) {
	if err := validateKey(key); err != nil {
		return State{}, err
	}
	k := c.keysFor(key, false)
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptInspect, k.withFence()).Slice()
	})
	var st State
	var errs []error
	var ttls []time.Duration
	answered := 0
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		answered++
		vals, _ := r.val.([]any)
		if len(vals) != 3 {
			errs = append(errs, fmt.Errorf("unexpected inspect reply %v", r.val))
			continue
		}
		if f, ok := vals[2].(string); ok {
			n, _ := strconv.ParseInt(f, 10, 64)
			st.Fence = max(st.Fence, n)
		}
		if pttl, ok := vals[0].(int64); ok && held(pttl) {
			ttls = append(ttls, time.Duration(max(pttl, 0))*time.Millisecond)
			if m, ok := vals[1].(string); ok {
				st.Metadata = m
			}
		}
	}
	if answered < c.quorum {
		return State{}, fmt.Errorf("inspect %s: %w", key, c.unavailable(answered, errs))
	}
	if len(ttls) >= c.quorum {
		slices.Sort(ttls)
		slices.Reverse(ttls)
		st.Held, st.TTL = true, ttls[c.quorum-1]
	} else {
		st.Metadata = ""
	}
	return st, nil
}

// InspectSlots reads the first n slots of a lock acquired WithPermits in one call (slot i at index
// i), as Inspect reads a plain lock: holder metadata, lease left and the slot's last fencing token.
// Slot 0 is what Inspect reads. It never reveals a token. A semaphore lives on one deployment, so
// on Redlock it is refused.
func (c *Client) InspectSlots(ctx context.Context, key string, n int) ([]State, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := c.validateSlots("inspect slots", n); err != nil {
		return nil, err
	}
	vals, err := runScript(ctx, c.nodes[0], scriptInspectSlots, c.keysFor(key, false)[:1], n).Slice()
	if err != nil {
		return nil, fmt.Errorf("inspect slots %s: %w", key, &NodeError{Node: 0, Addr: nodeAddr(c.nodes[0]), Err: err})
	}
	if len(vals) != 3*n {
		return nil, fmt.Errorf("inspect slots %s: unexpected reply of %d values for %d slots", key, len(vals), n)
	}
	states := make([]State, n)
	for i := range states {
		states[i] = slotState(vals[3*i : 3*i+3])
	}
	return states, nil
}

// held reads a lock key's PTTL: -2 is a free lock. 0 is a lease with less than a millisecond left,
// still held: a script that runs now finds the key, so a free lock must not be reported before a
// script would find it free (a caller that saw it free and then asked a script to hand it off would
// find it held).
func held(pttl int64) bool { return pttl != -2 }

// slotState reads one slot's {pttl, metadata, fence} from inspectslots.lua.
func slotState(vals []any) State {
	var st State
	if f, ok := vals[2].(string); ok {
		st.Fence, _ = strconv.ParseInt(f, 10, 64)
	}
	if pttl, ok := vals[0].(int64); ok && held(pttl) {
		st.Held, st.TTL = true, time.Duration(max(pttl, 0))*time.Millisecond
		st.Metadata, _ = vals[1].(string)
	}
	return st
}
