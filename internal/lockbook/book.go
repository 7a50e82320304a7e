package lockbook

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// Book is the operator's record of the locks it holds and of the outcomes it has not yet seen
// written to status. It owns the Keeper that renews the locks, so renewal runs on its own schedule,
// independent of API-server traffic and reconcile queues; it stops the Job of a lost lock at once,
// outside the reconcile queue; and it turns a loss into an event for the reconciler of the
// workload's kind.
// Its state is rebuilt after a restart by re-adoption; nothing in it needs to survive the process.
//
// The book outlives a leadership: it keeps renewing its locks while the process does not lead
// (renew-only mode, see Leadership), and acts on a loss only while it leads (docs/design.md,
// "Leadership").
type Book struct {
	redis  *redislock.Client
	keeper *redislock.Keeper

	mu      sync.Mutex
	entries map[types.UID]*bookEntry
	byLk    map[*redislock.Lock]*bookEntry

	// term is the leadership the book acts for: 0 while the process does not lead (renew-only), -1
	// for a book without leader election (it always leads), else the number of the Leadership
	// runnable that runs; terms counts the runnables made. A runnable that ends clears only its own
	// term, so a late end cannot demote a newer one.
	term  int64
	terms int64

	// events wakes, per kind, the reconciler of a workload whose lock was lost: one channel per
	// reconciler, so a loss never waits behind the losses of another kind.
	events map[locks.Kind]chan event.GenericEvent
	// handlers are each kind's reconciler's (SetHandlers).
	handlers map[locks.Kind]Handlers
	stops    chan struct{} // semaphore of maxConcurrentStops
}

// Handlers are how the book reaches the reconciler of one kind, besides its events.
type Handlers struct {
	// OnRenewFailed, if set, hears of the first failed renewal in a run of failures of one lock
	// (the keeper retries; the lock counts as lost only when its validity runs out), and, once per
	// lock, of a lease too short for the round trips the keeper measures (an error wrapping
	// redislock.ErrLeaseTooShort: renewals may not come back in time).
	OnRenewFailed func(w Workload, err error)
	// StopWorkload, if set, applies the lock-lost policy to the Job of a lock that was lost or whose
	// lease is at risk, before the reconciler is woken: a loss must not wait for a free worker while
	// the next holder may already start. It runs on its own goroutine.
	StopWorkload func(ctx context.Context, w Workload, cause error)
}

// Workload is what the book knows of the workload a lock protects, enough to stop its Job and wake
// its reconciler without a reconcile.
type Workload struct {
	Kind   locks.Kind
	Object types.NamespacedName // the object that asked for the lock
	UID    types.UID
	Job    string // the name of the Job to stop; "" while it is not known
	Policy batchv1alpha1.LockLostPolicy
}

// WorkloadOf is the workload of claimant c whose Job is job ("" while it is not known).
func WorkloadOf(c locks.Claimant, job string) Workload {
	return Workload{Kind: c.Kind, Object: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID,
		Job: job, Policy: c.Lock.OnLockLostOrDefault()}
}

// bookEntry is one workload's record. It lives from the acquisition until the reconciler has seen
// the outcome in status (Forget), so a pass that read a stale object from the cache cannot act on
// a lock that is already lost or released (re-adopt it, release it twice, report another outcome).
type bookEntry struct {
	Workload
	lock    *Lock // nil once released
	failing bool  // the last renewal failed in transport
	// lost is why the lock was lost (or its lease is at risk); nil while it is healthy.
	lost error
	// released is set once the lock was released after the Job ended.
	released bool
	// jobUID is the Job's once it was created, so a pass that read the object from before status
	// recorded it does not take a Job deleted since for one never made.
	jobUID types.UID
}

// New starts a book (and its keeper) over c. Stop it when the manager stops.
//
// A new book leads: without leader election (tests, --leader-elect=false) it always acts. Adding
// its Leadership runnable to a manager makes it follow that manager's election.
func New(c *redislock.Client) *Book {
	b := &Book{
		term:     -1,
		redis:    c,
		entries:  map[types.UID]*bookEntry{},
		byLk:     map[*redislock.Lock]*bookEntry{},
		events:   map[locks.Kind]chan event.GenericEvent{},
		handlers: map[locks.Kind]Handlers{},
		stops:    make(chan struct{}, maxConcurrentStops),
	}
	b.keeper = c.NewKeeper(redislock.KeeperOptions{OnLost: b.onLost, OnAtRisk: b.onAtRisk, OnRenew: b.onRenew, OnShortLease: b.onShortLease})
	return b
}

// Events delivers a generic event for every workload of kind whose lock was lost; its object
// names the workload (namespace, name, UID).
func (b *Book) Events(kind locks.Kind) <-chan event.GenericEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eventsOf(kind)
}

// eventsOf is kind's channel, made on first use; b.mu is held.
func (b *Book) eventsOf(kind locks.Kind) chan event.GenericEvent {
	ch, ok := b.events[kind]
	if !ok {
		ch = make(chan event.GenericEvent, 1024)
		b.events[kind] = ch
	}
	return ch
}

// Track records l as held by the workload and starts renewing it every interval (0 = ttl/3).
// w.Job, if set, names the Job to stop should the lock be lost.
func (b *Book) Track(w Workload, l *Lock, interval time.Duration) error {
	e := &bookEntry{Workload: w, lock: l}
	b.mu.Lock()
	if old, ok := b.entries[w.UID]; ok {
		e.jobUID = old.jobUID // the same workload's Job, whatever lock covers it now
		if old.lock != nil && old.lock.l != l.l {
			b.keeper.Remove(old.lock.l)
			delete(b.byLk, old.lock.l)
		}
	}
	b.entries[w.UID], b.byLk[l.l] = e, e
	b.setGauge()
	b.mu.Unlock()
	return b.keeper.Add(l.l, interval)
}

// BindJob tells the book the name of the Job that the workload's lock protects (w.Job).
func (b *Book) BindJob(w Workload) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[w.UID]; ok {
		e.Workload = w
	}
}

// Holding returns the lock the workload still holds in Redis as far as the book knows, healthy or
// at risk, or nil.
func (b *Book) Holding(uid types.UID) *Lock {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok {
		return e.lock
	}
	return nil
}

// Lost returns why the workload's lock was lost or put at risk, or nil.
func (b *Book) Lost(uid types.UID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok {
		return e.lost
	}
	return nil
}

// Record is what the book knows of one workload, read at once.
type Record struct {
	Lock     *Lock // held, healthy or at risk
	Lost     error
	Released bool
	Job      string
	JobUID   types.UID // MarkJobCreated
}

// RecordOf returns the book's record of the workload (the zero Record if it has none).
func (b *Book) RecordOf(uid types.UID) Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[uid]
	if !ok {
		return Record{}
	}
	return Record{Lock: e.lock, Lost: e.lost, Released: e.released, Job: e.Job, JobUID: e.jobUID}
}

// MarkLost records that the workload's lock is lost (found gone by the reconciler), stops renewing
// it and keeps the record until Forget.
func (b *Book) MarkLost(w Workload, cause error) {
	b.mu.Lock()
	e := b.entryFor(w)
	if e.lost == nil {
		e.lost = cause
	}
	l := b.detach(e)
	b.mu.Unlock()
	b.stopRenewing(l)
}

// MarkAtRisk records that the workload's lock cannot be trusted (cause) while it is still held and
// renewed: it covers the Job's pods until they are gone and is released after that.
func (b *Book) MarkAtRisk(uid types.UID, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok && e.lost == nil {
		e.lost = cause
	}
}

// Untrack stops renewing the workload's lock before a release and returns it (nil if none). The
// record stays: call MarkReleased after the release, or Track again if it failed.
func (b *Book) Untrack(uid types.UID) *Lock {
	b.mu.Lock()
	var l *Lock
	if e, ok := b.entries[uid]; ok {
		l = b.detach(e)
	}
	b.mu.Unlock()
	b.stopRenewing(l)
	return l
}

// MarkJobCreated records the UID of the workload's Job (w.Job), once it was created or found, and
// keeps it until Forget.
func (b *Book) MarkJobCreated(w Workload, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entryFor(w)
	e.Job, e.jobUID = w.Job, uid
}

// MarkReleased records that the workload's lock was released, until Forget.
func (b *Book) MarkReleased(w Workload) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entryFor(w).released = true
}

// Forget drops every record of the workload and stops renewing its lock (without releasing it in
// Redis). Call it once the outcome is in the status the reconciler reads, or the object is gone.
func (b *Book) Forget(uid types.UID) {
	b.mu.Lock()
	var l *Lock
	if e, ok := b.entries[uid]; ok {
		delete(b.entries, uid)
		l = b.detach(e)
	}
	b.mu.Unlock()
	b.stopRenewing(l)
}

// entryFor returns the workload's entry, made if it has none; b.mu is held.
func (b *Book) entryFor(w Workload) *bookEntry {
	e, ok := b.entries[w.UID]
	if !ok {
		e = &bookEntry{Workload: w}
		b.entries[w.UID] = e
	}
	return e
}

// detach removes the lock from an entry and returns it (nil if none); b.mu is held. The caller
// stops renewing it after unlocking, since the keeper may be calling back into the book.
func (b *Book) detach(e *bookEntry) *Lock {
	l := e.lock
	e.lock = nil
	if l != nil {
		delete(b.byLk, l.l)
	}
	b.setGauge()
	return l
}

func (b *Book) stopRenewing(l *Lock) {
	if l != nil {
		b.keeper.Remove(l.l)
	}
}

// ForgetObject drops the record of a workload of kind that is gone, by name.
func (b *Book) ForgetObject(kind locks.Kind, name types.NamespacedName) {
	b.mu.Lock()
	var uids []types.UID
	for uid, e := range b.entries {
		if e.Kind == kind && e.Object == name {
			uids = append(uids, uid)
		}
	}
	b.mu.Unlock()
	for _, uid := range uids {
		b.Forget(uid)
	}
}

// Len returns the number of locks held.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byLk)
}

// setGauge updates lockedjob_locks_held; b.mu is held.
func (b *Book) setGauge() { LocksHeld.Set(float64(len(b.byLk))) }

// Stop stops renewing. Locks stay in Redis until they expire, so a successor can re-adopt them.
func (b *Book) Stop() { b.keeper.Stop() }

var _ manager.LeaderElectionRunnable = (*leadership)(nil)
