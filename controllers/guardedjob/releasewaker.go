package guardedjob

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// releaseWaker wakes a guarded waiter as soon as a release frees its lock, so a handoff does not
// wait for the waiter's backoff, whoever released (a guarded Job or a LockedJob: they share the
// lock and its queue). A release that handed the lock to a guarded Job wakes that one alone; a
// plain release (nobody queued, or Redlock) wakes the lock's suspended guarded Jobs, and a broken
// subscription (Missed) every suspended guarded Job. Pub/sub may drop a message; the waiters'
// backoff stays the safety net. Simpler than the LockedJob's waker: no lineup reads, no place
// hints, since a guarded waiter records no place.
type releaseWaker struct {
	locks    *lockbook.Book
	identity locks.Identity
	jobs     client.Reader
	wake     chan<- event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader.
func (w *releaseWaker) Start(ctx context.Context) error {
	for {
		released, err := w.locks.SubscribeReleases(ctx)
		if err == nil {
			for r := range released {
				w.wakeFor(ctx, r)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second): // Redis went away: subscribe again
		}
	}
}

func (w *releaseWaker) wakeFor(ctx context.Context, r lockbook.Released) {
	if h, ok := locks.ParseHolder(r.HandedTo); ok && r.HandedTo != "" {
		if h.Kind == locks.KindJob && h.ClusterID == w.identity.ClusterID {
			job := &batchv1.Job{}
			job.Namespace, job.Name = h.Namespace, h.Name
			w.send(ctx, job)
		}
		return
	}
	list := &batchv1.JobList{}
	var opts []client.ListOption
	if !r.Missed {
		opts = append(opts, client.MatchingFields{fieldLockKey: r.Key})
	}
	if err := w.jobs.List(ctx, list, opts...); err != nil {
		return
	}
	for i := range list.Items {
		job := &list.Items[i]
		if waiting(job) {
			w.send(ctx, job)
		}
	}
}

func (w *releaseWaker) send(ctx context.Context, job *batchv1.Job) {
	select {
	case w.wake <- event.GenericEvent{Object: job}:
	case <-ctx.Done():
	}
}
