package lockbook

import (
	"context"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/lockedjob/lockedjob/internal/locks"
)

// The book across leaderships: it renews always, and acts on losses only while its manager leads.

// SetHandlers replaces the handlers of kind's reconciler while the keeper may be calling back: each
// manager a process builds after losing its leadership brings a reconciler of its own, and the
// book must stop Jobs through that one's clients, not through a stopped manager's cache. Set them
// before the first Track of the kind.
func (b *Book) SetHandlers(kind locks.Kind, h Handlers) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[kind] = h
}

// Leading reports whether the book acts on losses (stops Jobs, emits, wakes the reconciler) or
// only renews.
func (b *Book) Leading() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.term != 0
}

// Leadership returns a runnable for a manager with leader election: the book leads from the
// moment the manager is elected (the runnable starts) until the manager stops (its context ends),
// and renews only before and after. From this call on the book no longer leads until then.
func (b *Book) Leadership() manager.Runnable {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.terms++
	b.term = 0
	return &leadership{book: b, term: b.terms}
}

// leadership is the runnable of one manager's term; it needs the leader election.
type leadership struct {
	book *Book
	term int64
}

func (l *leadership) NeedLeaderElection() bool { return true }

func (l *leadership) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("lockbook")
	l.book.mu.Lock()
	l.book.term = l.term
	held := len(l.book.byLk)
	l.book.mu.Unlock()
	log.Info("Leading: acting on lock losses again", "locksHeld", held)
	<-ctx.Done()
	l.book.mu.Lock()
	if l.book.term == l.term {
		l.book.term = 0
	}
	held = len(l.book.byLk)
	l.book.mu.Unlock()
	log.Info("Not leading: renewing held locks only", "locksHeld", held)
	return nil
}

// dropQuietly removes a lock the book no longer leads for: no Event, no Job stop, no reconcile,
// since a process that does not lead must not write to the API server. The leader (this process
// again, or another) re-observes the workload on its start: it re-adopts the lock or finds it lost.
// b.mu is held; the caller stops renewing the returned lock after unlocking.
func (b *Book) dropQuietly(e *bookEntry, why string, cause error) *Lock {
	l := b.detach(e)
	if b.entries[e.UID] == e {
		delete(b.entries, e.UID)
	}
	ctrl.Log.WithName("lockbook").Info("Dropped a lock while not leading; the leader re-observes its workload",
		"kind", e.Kind, "workload", klog.KRef(e.Object.Namespace, e.Object.Name), "why", why, "cause", cause.Error())
	return l
}
