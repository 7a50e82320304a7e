package lockedjob

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// The queue keeper keeps this operator's waiters queued in Redis (see waiting.go).

// queueKeeper keeps this operator's waiters in their queues while they do not ask Redis themselves,
// as the keeper renews held locks: one call per lock every third of the waiters' liveness. A waiter
// that is not queued any more (handed the lock, or dropped while nobody kept it) is woken to ask.
type queueKeeper struct {
	locks    *lockbook.Book
	waiting  *waitBook
	liveness time.Duration
	timeout  time.Duration // of one call
	wake     chan<- event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader, whose passes fill the book.
func (k *queueKeeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.liveness / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.keep(ctx)
		}
	}
}

func (k *queueKeeper) keep(ctx context.Context) {
	log := ctrl.Log.WithName("queuekeeper")
	for key, waiters := range k.waiting.byLock() {
		members := make([]string, 0, len(waiters))
		for m := range waiters {
			members = append(members, m)
		}
		cctx, cancel := context.WithTimeout(ctx, k.timeout)
		gone, err := k.locks.KeepQueued(cctx, key, k.liveness, members...)
		cancel()
		if err != nil {
			// The waiters drop out only after their liveness; the next round or their own recheck
			// comes first.
			log.Error(err, "Keeping waiters queued failed", "lock", key, "waiters", len(members))
			continue
		}
		for _, m := range gone {
			k.waiting.wake(m)
			send(ctx, k.wake, waiters[m])
		}
	}
}
