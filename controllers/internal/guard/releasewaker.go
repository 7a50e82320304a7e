package guard

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// ReleaseWaker wakes a guarded waiter of Kind as soon as a release frees its lock, so a handoff
// does not wait for the waiter's backoff, whoever released (every kind shares the lock and its
// queue). A release that handed the lock to a holder of Kind wakes that one alone; a plain release
// (nobody queued, or Redlock) wakes the lock's waiters of Kind, and a broken subscription (Missed)
// every waiter of Kind. Pub/sub may drop a message; the waiters' backoff stays the safety net.
// Every waiter it wakes is woken in the wait book too, so its next pass asks Redis. Simpler than
// the LockedJob's waker: no lineup reads, no place hints, since a guarded waiter records no place.
type ReleaseWaker struct {
	Locks    *lockbook.Book
	Identity locks.Identity
	Kind     locks.Kind
	// Named is an object of Kind with that namespace and name, to name in a wake-up.
	Named func(namespace, name string) client.Object
	// Waiters lists the waiters of Kind of the lock whose Redis key is key, or of every lock if key
	// is "".
	Waiters func(ctx context.Context, key string) []client.Object
	// Waiting is the reconciler's wait book; nil when its waiters ask Redis at every pass.
	Waiting *waitbook.Book
	Wake    chan<- event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader.
func (w *ReleaseWaker) Start(ctx context.Context) error {
	for {
		released, err := w.Locks.SubscribeReleases(ctx)
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

func (w *ReleaseWaker) wakeFor(ctx context.Context, r lockbook.Released) {
	if h, ok := locks.ParseHolder(r.HandedTo); ok && r.HandedTo != "" {
		if h.Kind == w.Kind && h.ClusterID == w.Identity.ClusterID {
			if w.Waiting != nil {
				w.Waiting.Wake(r.HandedTo)
			}
			w.send(ctx, w.Named(h.Namespace, h.Name))
		}
		return
	}
	key := r.Key
	if r.Missed {
		key = ""
		if w.Waiting != nil {
			w.Waiting.WakeAll()
		}
	}
	for _, o := range w.Waiters(ctx, key) {
		w.send(ctx, o)
	}
}

// send wakes o, in the wait book too.
func (w *ReleaseWaker) send(ctx context.Context, o client.Object) {
	if w.Waiting != nil {
		w.Waiting.WakeObject(client.ObjectKeyFromObject(o))
	}
	select {
	case w.Wake <- event.GenericEvent{Object: o}:
	case <-ctx.Done():
	}
}
