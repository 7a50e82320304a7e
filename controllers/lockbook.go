package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// maxConcurrentStops bounds the Job stops that run outside the reconcile queue at once, so a Redis
// outage that loses every lock does not start thousands of API calls in one burst.
const maxConcurrentStops = 16

// LockBook is the operator's record of the locks it holds and of the outcomes it has not yet seen
// written to status. It owns the Keeper that renews the locks, so renewal runs on its own schedule,
// independent of API-server traffic and reconcile queues; it stops the Job of a lost lock at once,
// outside the reconcile queue; and it turns a loss into an event for the LockedJob's reconciler.
// Its state is rebuilt after a restart by re-adoption; nothing in it needs to survive the process.
//
// The book outlives a leadership: it keeps renewing its locks while the process does not lead
// (renew-only mode, see Leadership), and acts on a loss only while it leads (docs/design.md,
// "Leadership").
type LockBook struct {
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

	// events wakes the reconciler of a LockedJob whose lock was lost.
	events chan event.GenericEvent
	stops  chan struct{} // semaphore of maxConcurrentStops

	// OnRenewFailed, if set, hears of the first failed renewal in a run of failures of one lock
	// (the keeper retries; the lock counts as lost only when its validity runs out). Set it before
	// the first Track, or later with SetHandlers.
	OnRenewFailed func(lj *batchv1alpha1.LockedJob, err error)
	// StopWorkload, if set, applies the lock-lost policy to the Job of a lock that was lost or whose
	// lease is at risk, before the reconciler is woken: a loss must not wait for a free worker while
	// the next holder may already start. It runs on its own goroutine. Set it before the first
	// Track, or later with SetHandlers.
	StopWorkload func(ctx context.Context, w Workload, cause error)
}

// Workload is what the book knows of the Job a lock protects, enough to stop it without a reconcile.
type Workload struct {
	LockedJob types.NamespacedName
	UID       types.UID
	Job       string // the Job's name; "" while it is not known
	Policy    batchv1alpha1.LockLostPolicy
}

// bookEntry is one LockedJob's record. It lives from the acquisition until the reconciler has seen
// the outcome in status (Forget), so a pass that read a stale LockedJob from the cache cannot act on
// a lock that is already lost or released (re-adopt it, release it twice, report another outcome).
type bookEntry struct {
	Workload
	lock    *redislock.Lock // nil once released
	failing bool            // the last renewal failed in transport
	// lost is why the lock was lost (or its lease is at risk); nil while it is healthy.
	lost error
	// released is set once the lock was released after the Job ended.
	released bool
}

// NewLockBook starts a book (and its keeper) over c. Stop it when the manager stops.
//
// A new book leads: without leader election (tests, --leader-elect=false) it always acts. Adding
// its Leadership runnable to a manager makes it follow that manager's election.
func NewLockBook(c *redislock.Client) *LockBook {
	b := &LockBook{
		term:    -1,
		redis:   c,
		entries: map[types.UID]*bookEntry{},
		byLk:    map[*redislock.Lock]*bookEntry{},
		events:  make(chan event.GenericEvent, 1024),
		stops:   make(chan struct{}, maxConcurrentStops),
	}
	b.keeper = c.NewKeeper(redislock.KeeperOptions{OnLost: b.onLost, OnAtRisk: b.onAtRisk, OnRenew: b.onRenew})
	return b
}

// Redis returns the lock client.
func (b *LockBook) Redis() *redislock.Client { return b.redis }

// Events delivers a generic event for every LockedJob whose lock was lost.
func (b *LockBook) Events() <-chan event.GenericEvent { return b.events }

// Track records l as held by the LockedJob and starts renewing it every interval (0 = ttl/3). The
// LockedJob's status.jobName, if set, names the Job to stop should the lock be lost.
func (b *LockBook) Track(lj *batchv1alpha1.LockedJob, l *redislock.Lock, interval time.Duration) error {
	e := &bookEntry{Workload: workloadOf(lj), lock: l}
	b.mu.Lock()
	if old, ok := b.entries[lj.UID]; ok && old.lock != nil && old.lock != l {
		b.keeper.Remove(old.lock)
		delete(b.byLk, old.lock)
	}
	b.entries[lj.UID], b.byLk[l] = e, e
	b.setGauge()
	b.mu.Unlock()
	return b.keeper.Add(l, interval)
}

// BindJob tells the book the name of the Job that the LockedJob's lock protects.
func (b *LockBook) BindJob(lj *batchv1alpha1.LockedJob) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[lj.UID]; ok {
		e.Workload = workloadOf(lj)
	}
}

func workloadOf(lj *batchv1alpha1.LockedJob) Workload {
	return Workload{LockedJob: client.ObjectKeyFromObject(lj), UID: lj.UID, Job: lj.Status.JobName, Policy: lossPolicy(lj)}
}

// Holding returns the lock the LockedJob still holds in Redis as far as the book knows, healthy or
// at risk, or nil.
func (b *LockBook) Holding(uid types.UID) *redislock.Lock {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok {
		return e.lock
	}
	return nil
}

// Lost returns why the LockedJob's lock was lost or put at risk, or nil.
func (b *LockBook) Lost(uid types.UID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok {
		return e.lost
	}
	return nil
}

// bookRecord is what the book knows of one LockedJob, read at once.
type bookRecord struct {
	lock     *redislock.Lock // held, healthy or at risk
	lost     error
	released bool
	job      string
}

// recordOf returns the book's record of the LockedJob (the zero record if it has none).
func (b *LockBook) recordOf(uid types.UID) bookRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[uid]
	if !ok {
		return bookRecord{}
	}
	return bookRecord{lock: e.lock, lost: e.lost, released: e.released, job: e.Job}
}

// MarkLost records that the LockedJob's lock is lost (found gone by the reconciler), stops renewing
// it and keeps the record until Forget.
func (b *LockBook) MarkLost(lj *batchv1alpha1.LockedJob, cause error) {
	b.mu.Lock()
	e := b.entryFor(lj)
	if e.lost == nil {
		e.lost = cause
	}
	l := b.detach(e)
	b.mu.Unlock()
	b.stopRenewing(l)
}

// MarkAtRisk records that the LockedJob's lock cannot be trusted (cause) while it is still held and
// renewed: it covers the Job's pods until they are gone and is released after that.
func (b *LockBook) MarkAtRisk(uid types.UID, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[uid]; ok && e.lost == nil {
		e.lost = cause
	}
}

// Untrack stops renewing the LockedJob's lock before a release and returns it (nil if none). The
// record stays: call MarkReleased after the release, or Track again if it failed.
func (b *LockBook) Untrack(uid types.UID) *redislock.Lock {
	b.mu.Lock()
	var l *redislock.Lock
	if e, ok := b.entries[uid]; ok {
		l = b.detach(e)
	}
	b.mu.Unlock()
	b.stopRenewing(l)
	return l
}

// MarkReleased records that the LockedJob's lock was released, until Forget.
func (b *LockBook) MarkReleased(lj *batchv1alpha1.LockedJob) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entryFor(lj).released = true
}

// Forget drops every record of the LockedJob and stops renewing its lock (without releasing it in
// Redis). Call it once the outcome is in the status the reconciler reads, or the object is gone.
func (b *LockBook) Forget(uid types.UID) {
	b.mu.Lock()
	var l *redislock.Lock
	if e, ok := b.entries[uid]; ok {
		delete(b.entries, uid)
		l = b.detach(e)
	}
	b.mu.Unlock()
	b.stopRenewing(l)
}

// entryFor returns the LockedJob's entry, made if it has none; b.mu is held.
func (b *LockBook) entryFor(lj *batchv1alpha1.LockedJob) *bookEntry {
	e, ok := b.entries[lj.UID]
	if !ok {
		e = &bookEntry{Workload: workloadOf(lj)}
		b.entries[lj.UID] = e
	}
	return e
}

// detach removes the lock from an entry and returns it (nil if none); b.mu is held. The caller
// stops renewing it after unlocking, since the keeper may be calling back into the book.
func (b *LockBook) detach(e *bookEntry) *redislock.Lock {
	l := e.lock
	e.lock = nil
	if l != nil {
		delete(b.byLk, l)
	}
	b.setGauge()
	return l
}

func (b *LockBook) stopRenewing(l *redislock.Lock) {
	if l != nil {
		b.keeper.Remove(l)
	}
}

// ForgetObject drops the record of a LockedJob that is gone, by name.
func (b *LockBook) ForgetObject(name types.NamespacedName) {
	b.mu.Lock()
	var uids []types.UID
	for uid, e := range b.entries {
		if e.LockedJob == name {
			uids = append(uids, uid)
		}
	}
	b.mu.Unlock()
	for _, uid := range uids {
		b.Forget(uid)
	}
}

// Len returns the number of locks held.
func (b *LockBook) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byLk)
}

// setGauge updates lockedjob_locks_held; b.mu is held.
func (b *LockBook) setGauge() { locksHeld.Set(float64(len(b.byLk))) }

// Stop stops renewing. Locks stay in Redis until they expire, so a successor can re-adopt them.
func (b *LockBook) Stop() { b.keeper.Stop() }

// SetHandlers replaces OnRenewFailed and StopWorkload while the keeper may be calling back: each
// manager a process builds after losing its leadership brings a reconciler of its own, and the
// book must stop Jobs through that one's clients, not through a stopped manager's cache.
func (b *LockBook) SetHandlers(onRenewFailed func(*batchv1alpha1.LockedJob, error), stop func(context.Context, Workload, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.OnRenewFailed, b.StopWorkload = onRenewFailed, stop
}

// Leading reports whether the book acts on losses (stops Jobs, emits, wakes the reconciler) or
// only renews.
func (b *LockBook) Leading() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.term != 0
}

// Leadership returns a runnable for a manager with leader election: the book leads from the
// moment the manager is elected (the runnable starts) until the manager stops (its context ends),
// and renews only before and after. From this call on the book no longer leads until then.
func (b *LockBook) Leadership() manager.Runnable {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.terms++
	b.term = 0
	return &leadership{book: b, term: b.terms}
}

// leadership is the runnable of one manager's term; it needs the leader election.
type leadership struct {
	book *LockBook
	term int64
}

var _ manager.LeaderElectionRunnable = (*leadership)(nil)

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
// again, or another) re-observes the LockedJob on its start: it re-adopts the lock or finds it lost.
// b.mu is held; the caller stops renewing the returned lock after unlocking.
func (b *LockBook) dropQuietly(e *bookEntry, why string, cause error) *redislock.Lock {
	l := b.detach(e)
	if b.entries[e.UID] == e {
		delete(b.entries, e.UID)
	}
	ctrl.Log.WithName("lockbook").Info("Dropped a lock while not leading; the leader re-observes its LockedJob",
		"LockedJob", klog.KRef(e.LockedJob.Namespace, e.LockedJob.Name), "why", why, "cause", cause.Error())
	return l
}

// onRenew runs on the keeper's goroutine: count, and report the start of a run of failures.
func (b *LockBook) onRenew(l *redislock.Lock, err error) {
	onRenewMetric(l, err)
	b.mu.Lock()
	e, ok := b.byLk[l]
	first := ok && err != nil && !e.failing
	if ok {
		e.failing = err != nil
	}
	var obj *batchv1alpha1.LockedJob
	if first {
		obj = e.object()
	}
	// The keeper retries a failed renewal; only the leader tells the user (an Event is a write).
	onRenewFailed := b.OnRenewFailed
	leading := b.term != 0
	b.mu.Unlock()
	if first && leading && onRenewFailed != nil {
		onRenewFailed(obj, err)
	}
}

// object is a reference to the entry's LockedJob, enough for events and enqueueing.
func (e *bookEntry) object() *batchv1alpha1.LockedJob {
	obj := &batchv1alpha1.LockedJob{}
	obj.Namespace, obj.Name, obj.UID = e.LockedJob.Namespace, e.LockedJob.Name, e.UID
	return obj
}

// onLost runs on the keeper's goroutine when a lock is gone (or could not be renewed before its
// validity ended): record it, stop the Job, and wake the reconciler, without blocking the renewal of
// the other locks.
//
// While the book does not lead, the loss is dropped quietly instead: most often the new leader
// released a lock whose Job ended, and this process's compare-and-expire found another value.
func (b *LockBook) onLost(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	leading := b.term != 0
	switch {
	case ok && !leading:
		b.dropQuietly(e, "lost", err) // the keeper has dropped it already
	case ok:
		b.detach(e) // the keeper has dropped it already
	}
	b.mu.Unlock()
	if ok && leading {
		b.reportLoss(e, err)
	}
}

// onAtRisk runs on the keeper's goroutine when renewals keep failing and the lease will end soon:
// the Job is stopped now, while the lock is still ours, so its pods are gone before anyone else can
// acquire the lock. The keeper goes on renewing: if Redis comes back, the lock covers the pods until
// they are gone and the reconciler releases it.
//
// While the book does not lead it cannot stop the Job: it drops the lock quietly, and the leader
// finds it lost (or re-adopts it, if Redis came back in time) when it re-observes the LockedJob.
func (b *LockBook) onAtRisk(l *redislock.Lock, err error) {
	b.mu.Lock()
	e, ok := b.byLk[l]
	leading := b.term != 0
	var dropped *redislock.Lock
	if ok && !leading {
		dropped = b.dropQuietly(e, "lease at risk", err)
	}
	b.mu.Unlock()
	b.stopRenewing(dropped)
	if ok && leading {
		b.reportLoss(e, fmt.Errorf("renewals failing and the lease ends in less than its at-risk margin, so the Job is stopped while the lock still covers it: %w", err))
	}
}

// reportLoss records the first loss of an entry, stops its Job and wakes the reconciler.
func (b *LockBook) reportLoss(e *bookEntry, cause error) {
	b.mu.Lock()
	first := e.lost == nil
	if first {
		e.lost = cause
	}
	w := e.Workload
	obj := e.object()
	stopWorkload := b.StopWorkload
	b.mu.Unlock()
	if !first {
		return
	}
	lockLostTotal.Inc()
	go func() {
		if stopWorkload != nil && w.Job != "" && w.Policy != batchv1alpha1.LockLostIgnore {
			b.stops <- struct{}{}
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			stopWorkload(ctx, w, cause)
			cancel()
			<-b.stops
		}
		b.events <- event.GenericEvent{Object: obj}
	}()
}

// stopTimeout bounds one out-of-queue Job stop; the reconciler retries what it did not finish.
const stopTimeout = 10 * time.Second
