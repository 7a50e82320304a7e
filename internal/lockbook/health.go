package lockbook

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// RedisReadyCheck is a readiness check that fails while the lock backend cannot acquire locks (the
// only node, or a Redlock majority, does not answer): a replica that cannot reach Redis can
// neither acquire nor renew locks, so it should not be counted as ready.
// It takes anything that pings (the lock client, from main) rather than the client itself: the
// check needs nothing else of it.
func RedisReadyCheck(c interface{ Ping(context.Context) error }) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if err := c.Ping(ctx); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
}
