package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

const (
	// indexLockKey indexes LockedJobs by the Redis key of their lock, for wake-ups on release.
	indexLockKey = "status.lockKey"
	// indexQueueMember indexes LockedJobs by the member they queue as (their holder name), so a
	// release that handed the lock to one of them wakes that one alone.
	indexQueueMember = "queueMember"
)

// releaseWaker wakes a waiter as soon as a release frees its lock, so a handoff does not wait for
// the waiter's next backoff. A release that handed the lock to the head of its queue wakes that
// waiter alone: the others gain a place in line but have nothing to do, and waking them all would
// cost every release a Redis call and a status write per waiter. A plain release (nobody queued, or
// a Redlock deployment, which has no handoff) wakes every waiter of the lock. Redis pub/sub may drop
// a message; the waiters' backoff stays as the safety net.
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
			for r := range released {
				w.wake(ctx, r)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second): // Redis went away: subscribe again
		}
	}
}

func (w *releaseWaker) wake(ctx context.Context, r redislock.Released) {
	var list batchv1alpha1.LockedJobList
	match := client.MatchingFields{indexLockKey: r.Key}
	if r.HandedTo != "" {
		// The member may be another cluster's waiter on a shared Redis: then nobody here wakes.
		match = client.MatchingFields{indexQueueMember: r.HandedTo}
	}
	if err := w.reader.List(ctx, &list, match); err != nil {
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
