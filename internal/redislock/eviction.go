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
		return configByNode(ctx, n, "maxmemory-policy")
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

// configByNode returns CONFIG GET param by address: of n, or of every primary of a Cluster.
func configByNode(ctx context.Context, n redis.UniversalClient, param string) (map[string]string, error) {
	cc, isCluster := n.(*redis.ClusterClient)
	if !isCluster {
		v, err := configValue(ctx, n, param)
		if err != nil {
			return nil, err
		}
		return map[string]string{nodeAddr(n): v}, nil
	}
	var mu sync.Mutex
	out := make(map[string]string)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error {
		v, err := configValue(ctx, shard, param)
		if err != nil {
			return fmt.Errorf("%s: %w", shard.Options().Addr, err)
		}
		mu.Lock()
		out[shard.Options().Addr] = v
		mu.Unlock()
		return nil
	})
	return out, err
}

func configValue(ctx context.Context, n redis.Cmdable, param string) (string, error) {
	m, err := n.ConfigGet(ctx, param).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[param]
	if !ok {
		return "", fmt.Errorf("%w: CONFIG GET %s answered %v", errConfigUnreadable, param, m)
	}
	return v, nil
}

// errConfigUnreadable is a CONFIG GET that answered without the parameter asked for.
var errConfigUnreadable = errors.New("configuration parameter not readable")

// configRefused reports whether err is a CONFIG GET the node refused (an ACL without +config, a
// renamed command) or answered without the parameter, rather than a node that could not be reached.
func configRefused(err error) bool {
	return errors.Is(err, errConfigUnreadable) || redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "unknown command")
}

// evictionCheckError marks a refused CONFIG GET as ErrEvictionUnknown, keeping the node's error.
func evictionCheckError(err error) error {
	if configRefused(err) {
		return fmt.Errorf("%w: CONFIG GET refused: %w", ErrEvictionUnknown, err)
	}
	return err
}
