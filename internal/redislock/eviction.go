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
	err := c.checkConfig(ctx, "maxmemory-policy", evictionCheckError, func(node int, addr, policy string) error {
		if policy == "noeviction" {
			return nil
		}
		return fmt.Errorf("%w: node %d (%s) has maxmemory-policy %q, want noeviction", ErrEvictionPolicy, node, addr, policy)
	})
	if err != nil {
		return fmt.Errorf("check eviction policy: %w", err)
	}
	return nil
}

// checkConfig reads param on every node (every primary of a Cluster) and joins what judge says of
// each value (node index, address, value) with each node's failed read, as readError words it.
func (c *Client) checkConfig(ctx context.Context, param string, readError func(error) error,
	judge func(node int, addr, value string) error) error {
	replies := c.onNodes(ctx, nil, func(ctx context.Context, n redis.UniversalClient) (any, error) {
		return configByNode(ctx, n, param)
	})
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			errs = append(errs, readError(r.err))
			continue
		}
		values, _ := r.val.(map[string]string)
		for addr, v := range values {
			if err := judge(i, addr, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
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
