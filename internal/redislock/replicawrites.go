package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// CheckReplicaWrites reads min-replicas-to-write on every node (every primary of a Redis
// Cluster) and returns an error wrapping ErrUnreplicatedWrites, naming the node, where it is 0:
// such a primary, isolated from its replicas and Sentinels, goes on accepting a holder's renewals
// after a failover elsewhere. A node that refuses CONFIG GET or cannot be reached yields a plain
// error. Call it at start-up where a Sentinel may promote a replica; the setting is the operator's
// only defence against that split brain, so its absence is worth a warning, not a refusal.
func (c *Client) CheckReplicaWrites(ctx context.Context) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return configByNode(ctx, n, "min-replicas-to-write")
	})
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			if configRefused(r.err) {
				errs = append(errs, fmt.Errorf("node %d: min-replicas-to-write not readable: %w", i, r.err))
			} else {
				errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
			}
			continue
		}
		settings, _ := r.val.(map[string]string)
		for addr, v := range settings {
			if n, err := strconv.Atoi(v); err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("%w: node %d (%s) has min-replicas-to-write %q, want at least 1",
					ErrUnreplicatedWrites, i, addr, v))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("check replica writes: %w", errors.Join(errs...))
	}
	return nil
}
