package waitbook

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Keeper keeps a book's waiters in their queues while they do not ask Redis themselves, as the
// lock book renews held locks: one call per lock every third of the waiters' liveness. A waiter
// that is not queued any more (handed the lock, or dropped while nobody kept it) is woken to ask.
type Keeper struct {
	Locks    *lockbook.Book
	Waiting  *Book
	Liveness time.Duration
	Timeout  time.Duration // of one call
	// Named is the object to wake a waiter by; Wake is where its wake-up goes.
	Named func(types.NamespacedName) client.Object
	Wake  chan<- event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader, whose passes fill the book.
func (k *Keeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Liveness / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.Keep(ctx)
		}
	}
}

// Keep keeps every waiter of the book queued, once.
func (k *Keeper) Keep(ctx context.Context) {
	log := ctrl.Log.WithName("queuekeeper")
	for key, waiters := range k.Waiting.ByLock() {
		members := make([]string, 0, len(waiters))
		for m := range waiters {
			members = append(members, m)
		}
		cctx, cancel := context.WithTimeout(ctx, k.Timeout)
		gone, err := k.Locks.KeepQueued(cctx, key, k.Liveness, members...)
		cancel()
		if err != nil {
			// The waiters drop out only after their liveness; the next round or their own recheck
			// comes first.
			log.Error(err, "Keeping waiters queued failed", "lock", key, "waiters", len(members))
			continue
		}
		for _, m := range gone {
			k.Waiting.Wake(m)
			select {
			case k.Wake <- event.GenericEvent{Object: k.Named(waiters[m])}:
			case <-ctx.Done():
				return
			}
		}
	}
}
