package redislock

import (
	"context"
	"fmt"
	"strconv"
)

// CheckReplicaWrites reads min-replicas-to-write on every node (every primary of a Redis
// Cluster) and returns an error wrapping ErrUnreplicatedWrites, naming the node, where it is 0:
// such a primary, isolated from its replicas and Sentinels, goes on accepting a holder's renewals
// after a failover elsewhere. A node that refuses CONFIG GET or cannot be reached yields a plain
// error. Call it at start-up where a Sentinel may promote a replica; the setting is the operator's
// only defence against that split brain, so its absence is worth a warning, not a refusal.
func (c *Client) CheckReplicaWrites(ctx context.Context) error {
	readError := func(err error) error {
		if configRefused(err) {
			return fmt.Errorf("min-replicas-to-write not readable: %w", err)
		}
		return err
	}
	err := c.checkConfig(ctx, "min-replicas-to-write", readError, func(node int, addr, v string) error {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			return nil
		}
		return fmt.Errorf("%w: node %d (%s) has min-replicas-to-write %q, want at least 1", ErrUnreplicatedWrites, node, addr, v)
	})
	if err != nil {
		return fmt.Errorf("check replica writes: %w", err)
	}
	return nil
}
