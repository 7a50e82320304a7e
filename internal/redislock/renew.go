package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Renew extends the lease to ttl (0 keeps the current lease length) if the lock is still ours.
// It returns ErrLockLost when the lock is gone or held by someone else, ErrNotHeld after Release,
// and other errors when Redis could not answer (the lock may still be ours; retry until ValidUntil).
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotHeld
	}
	if ttl == 0 {
		ttl = l.LeaseTTL()
	}
	ttl = ttl.Truncate(time.Millisecond) // what Redis keeps (see Acquire)
	if err := validateTTL(ttl); err != nil {
		return err
	}
	switch l.state.Load() {
	case stateReleased:
		return ErrNotHeld
	case stateLost:
		return ErrLockLost
	}
	c := l.client
	start := time.Now()
	ttlMs := ttl.Milliseconds()
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptRenew, l.keys.lockMeta(), l.token, ttlMs).Result()
	})
	if err := l.settleRenew(tallyInts(replies), start, time.Now(), ttl); err != nil {
		return fmt.Errorf("renew %s: %w", l.key, err)
	}
	return nil
}

// settleRenew turns the nodes' answers to a renew into the lock's new state and the caller's
// error. Shared by Renew and the Keeper, so both judge a renewal the same way.
func (l *Lock) settleRenew(t tally, start, now time.Time, ttl time.Duration) error {
	c := l.client
	switch {
	case t.ok >= c.quorum:
		validUntil := c.validUntil(start, ttl)
		if !now.Before(validUntil) {
			// Redis extended the key, but the answer came back after the lease we asked for had run
			// out (a pause, a very slow network): we cannot know whether someone else held it since.
			l.markLost()
			return fmt.Errorf("%w: renew answered after the lease ran out", ErrLockLost)
		}
		l.mu.Lock()
		l.ttl, l.leaseStart, l.validUntil = ttl, start, validUntil
		l.mu.Unlock()
		return nil
	case t.no > len(c.nodes)-c.quorum:
		l.markLost()
		return ErrLockLost
	default:
		return c.unavailable(t.ok+t.no, t.errs)
	}
}

// renewPipelined sends a renew for every lock to every node, one pipeline per node, and tallies
// the answers per lock.
func (c *Client) renewPipelined(ctx context.Context, locks []*Lock, ttls []time.Duration) []tally {
	perNode := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return renewPipeline(ctx, n, locks, ttls)
	})
	tallies := make([]tally, len(locks))
	for node, r := range perNode {
		results, _ := r.val.([]nodeReply)
		for i := range locks {
			switch {
			case r.err != nil:
				tallies[i].errs = append(tallies[i].errs, r.err)
			case results[i].err != nil:
				tallies[i].errs = append(tallies[i].errs, &NodeError{Node: node, Addr: nodeAddr(c.nodes[node]), Err: results[i].err})
			case results[i].val == int64(1):
				tallies[i].ok++
			default:
				tallies[i].no++
			}
		}
	}
	return tallies
}

// renewPipeline runs renew.lua for each lock in one pipeline on one node. EVALSHA in a pipeline
// cannot fall back to EVAL per command, so on a plain client the pipeline starts with SCRIPT LOAD
// (a hash lookup when the server knows the script): a server that lost its script cache (a
// restart, a failover) costs no extra round trip, which matters when the round trip is slow. A
// cluster client routes a keyless command to one node only, so there a NOSCRIPT reply gets the
// script loaded everywhere and the pipeline sent once more (withScript).
func renewPipeline(ctx context.Context, n redis.UniversalClient, locks []*Lock, ttls []time.Duration) ([]nodeReply, error) {
	_, plain := n.(*redis.Client)
	var cmds []redis.Cmder
	err := withScript(ctx, n, scriptRenew, func() (err error) {
		cmds, err = n.Pipelined(ctx, func(p redis.Pipeliner) error {
			if plain {
				p.ScriptLoad(ctx, renewFullSrc)
			}
			for i, l := range locks {
				scriptRenew.EvalSha(ctx, p, l.keys.lockMeta(), l.token, ttls[i].Milliseconds())
			}
			return nil
		})
		return err
	})
	if plain && len(cmds) > 0 {
		cmds = cmds[1:]
	}
	if len(cmds) != len(locks) {
		if err == nil {
			err = fmt.Errorf("pipeline returned %d replies for %d commands", len(cmds), len(locks))
		}
		return nil, err
	}
	out := make([]nodeReply, len(locks))
	for i, cmd := range cmds {
		v, err := cmd.(*redis.Cmd).Int64()
		out[i] = nodeReply{val: v, err: err}
	}
	return out, nil
}
