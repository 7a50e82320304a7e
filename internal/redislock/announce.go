package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Protocol is the version of the lock protocol this library speaks to Redis: what its scripts
// store and expect. Clients that share a Redis announce theirs (Announce), so one can refuse what an
// older one would break. History:
//   - 1 (never announced): semaphores whose permits acquisitions stored; before that, no semaphores,
//     and plain scripts that grant slot 0 without looking at a semaphore's other slots.
//   - 2: plain scripts divert to a semaphore's (see WithPermits); only SetPermits stores permits.
const Protocol = 2

// SemaphoreProtocol is the oldest protocol under which a semaphore of more than one permit is
// safe: an older client's plain scripts would grant slot 0 while the permits are held.
const SemaphoreProtocol = 2

// Announced is a client that announced an older protocol than this library's.
type Announced struct {
	Member   string
	Protocol int // 0: the announcement did not parse
}

// Announce records member (one process: name it so two processes never share it) as a client of
// this Redis that speaks Protocol, for lease, and returns the clients whose live announcement names
// an older protocol. Call it more often than lease, so the announcement never lapses while the
// process runs. A client that never announces is invisible here: Protocol 1 and older did not;
// docs/design.md ("Upgrades") says in which order to upgrade so that none is left. On Redlock it
// announces on every node and reports what any node holds.
func (c *Client) Announce(ctx context.Context, member string, lease time.Duration) ([]Announced, error) {
	if member == "" {
		return nil, invalidf("announce: empty member")
	}
	if lease < time.Millisecond {
		return nil, invalidf("announce: lease %v must be at least 1ms", lease)
	}
	key := []string{c.clientsKey()}
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return runScript(ctx, n, scriptAnnounce, key, member, Protocol, lease.Milliseconds()).Slice()
	})
	seen := map[string]bool{}
	var behind []Announced
	for i, r := range replies {
		if r.err != nil {
			return nil, fmt.Errorf("announce %s: %w", member, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: r.err})
		}
		vals, _ := r.val.([]any)
		for j := 0; j+1 < len(vals); j += 2 {
			m, _ := vals[j].(string)
			p, _ := vals[j+1].(int64)
			if !seen[m] {
				seen[m] = true
				behind = append(behind, Announced{Member: m, Protocol: int(p)})
			}
		}
	}
	return behind, nil
}

// Withdraw removes member's announcement, for a process that stops: the clients it made wait see
// at once that it is gone, instead of when its lease ends.
func (c *Client) Withdraw(ctx context.Context, member string) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return n.HDel(ctx, c.clientsKey(), member).Result()
	})
	for i, r := range replies {
		if r.err != nil {
			return fmt.Errorf("withdraw %s: %w", member, &NodeError{Node: i, Addr: nodeAddr(c.nodes[i]), Err: r.err})
		}
	}
	return nil
}

// clientsKey holds the announcements. It has no braces, so it can be no lock's key.
func (c *Client) clientsKey() string { return c.prefix + "clients" }
