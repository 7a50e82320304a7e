package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CheckEvictionPolicy reads maxmemory-policy on every node (every primary of a Redis Cluster) and
// returns an error wrapping ErrEvictionPolicy, naming the node and its policy, unless it is
// noeviction everywhere: an evicted lock key is a lock that two holders can hold. A node that
// refuses CONFIG GET yields an error wrapping ErrEvictionUnknown; a node that cannot be reached, a
// plain transport error. Call it at start-up.
func (c *Client) CheckEvictionPolicy(ctx context.Context) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return evictionPolicies(ctx, n)
	})
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			errs = append(errs, evictionCheckError(r.err))
			continue
		}
		policies, _ := r.val.(map[string]string)
		for addr, policy := range policies {
			if policy != "noeviction" {
				errs = append(errs, fmt.Errorf("%w: node %d (%s) has maxmemory-policy %q, want noeviction",
					ErrEvictionPolicy, i, addr, policy))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("check eviction policy: %w", errors.Join(errs...))
	}
	return nil
}

// evictionPolicies returns maxmemory-policy by address: of n, or of every primary of a Cluster.
func evictionPolicies(ctx context.Context, n redis.UniversalClient) (map[string]string, error) {
	cc, isCluster := n.(*redis.ClusterClient)
	if !isCluster {
		p, err := evictionPolicy(ctx, n)
		if err != nil {
			return nil, err
		}
		return map[string]string{nodeAddr(n): p}, nil
	}
	var mu sync.Mutex
	out := make(map[string]string)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error {
		p, err := evictionPolicy(ctx, shard)
		if err != nil {
			return fmt.Errorf("%s: %w", shard.Options().Addr, err)
		}
		mu.Lock()
		out[shard.Options().Addr] = p
		mu.Unlock()
		return nil
	})
	return out, err
}

func evictionPolicy(ctx context.Context, n redis.Cmdable) (string, error) {
	m, err := n.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", fmt.Errorf("%w: CONFIG GET maxmemory-policy answered %v", ErrEvictionUnknown, m)
	}
	return p, nil
}

// evictionCheckError marks a refused CONFIG GET as ErrEvictionUnknown, keeping the node's error.
func evictionCheckError(err error) error {
	if redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "unknown command") {
		return fmt.Errorf("%w: CONFIG GET refused: %w", ErrEvictionUnknown, err)
	}
	return err
}
