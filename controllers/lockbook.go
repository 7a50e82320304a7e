package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// LockBook is the operator's record of the locks it holds. It owns the Keeper that renews them, so
// renewal runs on its own schedule, independent of API-server traffic and reconcile queues, and it
// turns a lost lock into an event for the LockedJob's reconciler. Its state is rebuilt after a
// restart by re-adoption; nothing in it needs to survive the process.
type LockBook struct {
	redis  *redislock.Client
	keeper *redislock.Keeper

	mu   sync.Mutex
	held map[types.UID]*bookEntry
	lost map[types.UID]error
	byLk map[*redislock.Lock]*bookEntry

	// events wakes the reconciler of a LockedJob whose lock was lost.
	events chan event.GenericEvent

	// OnRenewFailed, if set, hears of the first failed renewal in a run of failures of one lock
	// (the keeper retries; the lock counts as lost only when its validity runs out). Set it before
	// the first Track.
	OnRenewFailed func(lj *batchv1alpha1.LockedJob, err error)
}

type bookEntry struct {
	name    types.NamespacedName
	uid     types.UID
	lock    *redislock.Lock
	failing bool // the last renewal failed in transport
}

// NewLockBook starts a book (and its keeper) over c. Stop it when the manager stops.
func NewLockBook(c *redislock.Client) *LockBook {
	b := &LockBook{
		redis:  c,
		held:   map[types.UID]*bookEntry{},
		lost:   map[types.UID]error{},
		byLk:   map[*redislock.Lock]*bookEntry{},
		events: make(chan event.GenericEvent, 1024),
	}
	b.keeper = c.NewKeeper(redislock.KeeperOptions{OnLost: b.onLost, OnRenew: b.onRenew})
	return b
}

// Redis returns the lock client.
func (b *LockBook) Redis() *redislock.Client { return b.redis }

// Events delivers a generic event for every LockedJob whose lock was lost.
func (b *LockBook) Events() <-chan event.GenericEvent { return b.events }

// Track records l as held by the LockedJob and starts renewing it every interval (0 = ttl/3).
func (b *LockBook) Track(lj *batchv1alpha1.LockedJob, l *redislock.Lock, interval time.Duration) error {
	e := &bookEntry{name: client.ObjectKeyFromObject(lj), uid: lj.UID, lock: l}
	b.mu.Lock()
	if old, ok := b.held[lj.UID]; ok && old.lock != l {
		b.keeper.Remove(old.lock)
		delete(b.byLk, old.lock)
	}
	b.held[lj.UID], b.byLk[l] = e, e
	delete(b.lost, lj.UID)
	locksHeld.Set(float64(len(b.held)))
	b.mu.Unlock()
	return b.keeper.Add(l, interval)
}

// Held returns the lock the LockedJob holds, or nil.
func (b *LockBook) Held(uid types.UID) *redislock.Lock {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.held[uid]; ok {
		return e.lock
	}
	return nil
}

// Lost returns why the LockedJob's lock was lost, or nil if it was not.
func (b *LockBook) Lost(uid types.UID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost[uid]
}

// Forget stops renewing the LockedJob's lock and drops every record of it, returning the lock
// (nil if none). It does not release the lock in Redis.
func (b *LockBook) Forget(uid types.UID) *redislock.Lock {
	b.mu.Lock()
	e, ok := b.held[uid]
	delete(b.held, uid)
	delete(b.lost, uid)
	if ok {
		delete(b.byLk, e.lock)
	}
	locksHeld.Set(float64(len(b.held)))
	b.mu.Unlock()
	if !ok {
		return nil
	}
	b.keeper.Remove(e.lock)
	return e.lock
}

// Len returns the number of locks held.
func (b *LockBook) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// Stop stops renewing. Locks stay in Redis until they expire, so a successor can re-adopt them.
func (b *LockBook) Stop() { b.keeper.Stop() }

// onRenew runs on the keeper's goroutine: count, and report the start of a run of failures.
func (b *LockBook) onRenew(l *redislock.Lock, err error) {
	onRenewMetric(l, err)
	b.mu.Lock()
	e, ok := b.byLk[l]
	first := ok && err != nil && !e.failing
	if ok {
		e.failing = err != nil
	}
	b.mu.Unlock()
	if first && b.OnRenewFailed != nil {
		b.OnRenewFailed(e.object(), err)
	}
}

// object is a reference to the entry's LockedJob, enough for events and enqueueing.
func (e *bookEntry) object() *batchv1alpha1.LockedJob {
	obj := &batchv1alpha1.LockedJob{}
	obj.Namespace, obj.Name, obj.UID = e.name.Namespace, e.name.Name, e.uid
	return obj
}

// onLost runs on the keeper's goroutine: record, then wake the reconciler without blocking renewal
// of the other locks.
func (b *LockBook) onLost(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	if ok {
		b.lost[e.uid] = err
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	lockLostTotal.Inc()
	obj := e.object()
	select {
	case b.events <- event.GenericEvent{Object: obj}:
	default:
		go func() { b.events <- event.GenericEvent{Object: obj} }()
	}
}

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
