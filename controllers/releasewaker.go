package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// indexLockKey indexes LockedJobs by the Redis key of their lock, for wake-ups on release.
const indexLockKey = "status.lockKey"

// releaseWaker wakes the waiters of a lock as soon as its holder releases it, so a handoff does not
// wait for the waiter's next backoff. Redis pub/sub may drop a message; the waiters' backoff stays
// as the safety net.
type releaseWaker struct {
	redis  *redislock.Client
	reader client.Reader
	events chan event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader.
func (w *releaseWaker) Start(ctx context.Context) error {
	for {
		released, err := w.redis.SubscribeReleases(ctx)
		if err == nil {
			for key := range released {
				w.wake(ctx, key)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second): // Redis went away: subscribe again
		}
	}
}

func (w *releaseWaker) wake(ctx context.Context, redisKey string) {
	var list batchv1alpha1.LockedJobList
	if err := w.reader.List(ctx, &list, client.MatchingFields{indexLockKey: redisKey}); err != nil {
		return
	}
	for i := range list.Items {
		lj := &list.Items[i]
		if lj.Status.Phase != batchv1alpha1.PhaseWaiting {
			continue
		}
		select {
		case w.events <- event.GenericEvent{Object: lj}:
		case <-ctx.Done():
			return
		}
	}
}
