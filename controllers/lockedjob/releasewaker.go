package lockedjob

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
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
// waiter first (handed, at the highest priority), then reads the new lineup once and wakes the
// waiters whose shown place changed (moved) with a hint of their place, so they record it without a
// Redis call each (see package waitbook). A plain release (nobody queued, or Redlock, which has no
// handoff) wakes every waiter of the lock, and so does a broken subscription (Missed) for every
// lock. Redis pub/sub may drop a message; the waiters' re-checks stay as the safety net.
type releaseWaker struct {
	locks    *lockbook.Book
	identity locks.Identity
	reader   client.Reader
	waiting  *waitbook.Book
	handed   chan event.GenericEvent
	moved    chan event.GenericEvent
	timeout  time.Duration // of the lineup read
}

// Start implements manager.Runnable; it runs only on the leader.
func (w *releaseWaker) Start(ctx context.Context) error {
	for {
		released, err := w.locks.SubscribeReleases(ctx)
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

func (w *releaseWaker) wake(ctx context.Context, r lockbook.Released) {
	if r.Missed {
		// Releases went unannounced: every waiter asks Redis once, as after a restart.
		w.waiting.WakeAll()
		w.send(ctx, w.moved, w.waiters(ctx))
		return
	}
	if r.HandedTo == "" {
		w.send(ctx, w.moved, w.wakeEach(w.waiters(ctx, client.MatchingFields{indexLockKey: r.Key})))
		return
	}
	// The member may be another cluster's waiter on a shared Redis: then nobody here wakes. Its
	// phase is not asked: the cache may not show it Waiting yet, and the lock waits for it.
	w.waiting.Handed(r.HandedTo, time.Now())
	w.send(ctx, w.handed, w.wakeEach(w.lockedJobs(ctx, false, client.MatchingFields{indexQueueMember: r.HandedTo})))
	w.tellPlaces(ctx, r)
}

// placesTold are the places whose shown value changes when a waiter moves up by one: every exact
// place, and each bucket bound of shownPosition (the waiter at a bound just left the bucket above).
var placesTold = func() []int {
	places := make([]int, 0, exactPositions+20)
	for p := 1; p <= exactPositions; p++ {
		places = append(places, p)
	}
	for bound := nextBound(exactPositions); bound <= 10_000_000; bound = nextBound(bound) {
		places = append(places, bound)
	}
	return places
}()

// tellPlaces reads who now stands at placesTold, one Redis call for the whole queue, and wakes
// those waiters of this operator with a hint of their place.
func (w *releaseWaker) tellPlaces(ctx context.Context, r lockbook.Released) {
	key, ok := w.locks.LibraryKey(r.Key)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	members, err := w.locks.Lineup(cctx, key, placesTold...)
	cancel()
	if err != nil {
		ctrl.Log.WithName("releasewaker").V(1).Info("Reading the lineup after a handoff failed; waiters learn their place at their re-check", "lock", key, "error", err.Error())
		return
	}
	now := time.Now()
	for i, m := range members {
		if !w.waiting.Tell(m, waitbook.Hint{Position: placesTold[i], At: now}) {
			continue // not ours, or not known to wait: its next pass asks Redis anyway
		}
		w.send(ctx, w.moved, w.lockedJobs(ctx, false, client.MatchingFields{indexQueueMember: m}))
	}
}

// wakeEach makes the next pass of each LockedJob ask Redis.
func (w *releaseWaker) wakeEach(ljs []*batchv1alpha1.LockedJob) []*batchv1alpha1.LockedJob {
	for _, lj := range ljs {
		w.waiting.Wake(w.identity.Holder(locks.ClaimantOf(lj)))
	}
	return ljs
}

// waiters lists the LockedJobs that match and the cache shows Waiting.
func (w *releaseWaker) waiters(ctx context.Context, opts ...client.ListOption) []*batchv1alpha1.LockedJob {
	return w.lockedJobs(ctx, true, opts...)
}

// lockedJobs lists the LockedJobs that match, only the Waiting ones if waitingOnly.
func (w *releaseWaker) lockedJobs(ctx context.Context, waitingOnly bool, opts ...client.ListOption) []*batchv1alpha1.LockedJob {
	var list batchv1alpha1.LockedJobList
	if err := w.reader.List(ctx, &list, opts...); err != nil {
		return nil
	}
	var out []*batchv1alpha1.LockedJob
	for i := range list.Items {
		if !waitingOnly || list.Items[i].Status.Phase == batchv1alpha1.PhaseWaiting {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

func (w *releaseWaker) send(ctx context.Context, ch chan event.GenericEvent, ljs []*batchv1alpha1.LockedJob) {
	for _, lj := range ljs {
		select {
		case ch <- event.GenericEvent{Object: lj}:
		case <-ctx.Done():
			return
		}
	}
}

// wakeupIndexes are the cache indexes the release waker looks LockedJobs up by.
func wakeupIndexes(id locks.Identity) map[string]client.IndexerFunc {
	return map[string]client.IndexerFunc{
		indexLockKey: func(o client.Object) []string {
			return []string{o.(*batchv1alpha1.LockedJob).Status.LockKey}
		},
		// A waiter's queue member is its holder name, derived from the object, not read from status.
		indexQueueMember: func(o client.Object) []string {
			return []string{id.Holder(locks.ClaimantOf(o.(*batchv1alpha1.LockedJob)))}
		},
	}
}

// indexForWakeups adds the wakeupIndexes to the manager's cache.
func indexForWakeups(ctx context.Context, indexer client.FieldIndexer, id locks.Identity) error {
	for name, index := range wakeupIndexes(id) {
		if err := indexer.IndexField(ctx, &batchv1alpha1.LockedJob{}, name, index); err != nil {
			return fmt.Errorf("index %s: %w", name, err)
		}
	}
	return nil
}
