package controllers

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// Waiting without asking (docs/design.md, "Scale"). A waiter behind the head of its queue has
// nothing to do until its place changes, yet asking Redis on a timer cost every waiter a script per
// poll: O(depth × wait) calls, and a work queue full of polls that a handoff waited behind. Instead:
//   - the queue keeper keeps this operator's waiters queued, one call per lock (KeepQueued);
//   - after a handoff the release waker reads the new lineup once (Lineup) and tells the waiters
//     whose shown place changed (placeHints), which record it without a Redis call;
//   - the head still asks on its backoff: a lock freed by an expiry is announced by nobody;
//   - the others ask again only after Config.QueueRecheck, the safety net for what no announcement
//     tells (a waiter ahead that gave up, a lost message).

// Priorities in the controller's work queue (controller-runtime's priority queue; default 0). Under a
// burst the queue holds thousands of passes: the ones that a lock or a running Job waits on go first.
const (
	// priorityUrgent: a lock handed to a waiter (it is held for nobody until the waiter claims it),
	// or a lock lost or at risk (the Job must stop).
	priorityUrgent = 100
	// priorityJobEnded: a Job finished; its pass releases the lock and hands it on.
	priorityJobEnded = 50
)

// waiter is one waiting LockedJob of this operator, by its queue member (Identity.Holder).
type waiter struct {
	obj types.NamespacedName
	key string // the lock's name in the lock library
	// due is when the waiter asks Redis again unless something wakes it first: a pass that runs
	// before (its own status write, a resync) has nothing new to ask about. priority is the work
	// queue's for that re-check.
	due      time.Time
	priority int
	// woken: a release or the queue keeper says something changed; the next pass asks Redis.
	woken bool
	// hint: a lineup told the waiter its new place; the next pass records it without asking.
	hint *placeHint
}

// placeHint is what a lineup read after a handoff told of one waiter's place.
type placeHint struct {
	position int
	holder   string // the holder the lock was handed to
	at       time.Time
}

// hintMaxAge bounds how old a hint a pass trusts, so a hint describes the queue as it is.
const hintMaxAge = 30 * time.Second

// waitBook is this operator's waiting LockedJobs: when each asks Redis next, and what the release
// waker and the queue keeper told it since. The queue keeper keeps them queued, and
// lockedjob_lockedjobs_waiting counts them. A LockedJob the book does not know asks Redis: the book only
// ever spares calls.
type waitBook struct {
	mu  sync.Mutex
	set map[string]*waiter // by queue member
}

// ask is what a waiting LockedJob's pass does about Redis (see next).
type ask int

const (
	askRedis   ask = iota // acquire or learn its place: first pass, woken, or due
	askHint               // record the place a lineup told
	askNothing            // nothing changed since it last asked: wait on until due
)

// waiting records that member waits for lock key and asks again at due, at priority.
func (b *waitBook) waiting(member string, obj types.NamespacedName, key string, due time.Time, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set == nil {
		b.set = map[string]*waiter{}
	}
	w := &waiter{obj: obj, key: key, due: due, priority: priority}
	if old := b.set[member]; old != nil {
		// next consumed what the pass started with; anything here came while it ran and is news.
		w.woken, w.hint = old.woken, old.hint
	}
	b.set[member] = w
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// done forgets a member that no longer waits (it holds its lock, gave up, or is gone).
func (b *waitBook) done(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.set, member)
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// doneObject forgets a LockedJob that is gone, whatever its member was.
func (b *waitBook) doneObject(obj types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for m, w := range b.set {
		if w.obj == obj {
			delete(b.set, m)
		}
	}
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// wake makes member's next pass ask Redis, and drops any hint: the lock may be its now.
func (b *waitBook) wake(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.set[member]; w != nil {
		w.woken, w.hint = true, nil
	}
}

// wakeAll makes every waiter ask Redis at its next pass (releases went unannounced).
func (b *waitBook) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.set {
		w.woken, w.hint = true, nil
	}
}

// tell leaves member a hint of its place; it reports false for a member the book does not know,
// whose next pass asks Redis anyway.
func (b *waitBook) tell(member string, hint placeHint) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	if w == nil {
		return false
	}
	w.hint = &hint
	return true
}

// next says what member's pass does now, and passes the hint, or the time to wait on and the
// priority of that re-check. It consumes what it returns: a wake-up or hint counts once.
func (b *waitBook) next(member string, now time.Time) (what ask, hint placeHint, left time.Duration, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	switch {
	case w == nil:
		return askRedis, placeHint{}, 0, 0
	case w.woken:
		w.woken, w.hint = false, nil
		return askRedis, placeHint{}, 0, 0
	case w.hint != nil && now.Sub(w.hint.at) <= hintMaxAge:
		hint := *w.hint
		w.hint = nil
		return askHint, hint, 0, 0
	case now.Before(w.due):
		return askNothing, placeHint{}, w.due.Sub(now), w.priority
	default:
		return askRedis, placeHint{}, 0, 0
	}
}

// byLock groups the waiters by lock, for one KeepQueued call each.
func (b *waitBook) byLock() map[string]map[string]types.NamespacedName {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]map[string]types.NamespacedName{}
	for m, w := range b.set {
		if out[w.key] == nil {
			out[w.key] = map[string]types.NamespacedName{}
		}
		out[w.key][m] = w.obj
	}
	return out
}

// queueKeeper keeps this operator's waiters in their queues while they do not ask Redis themselves,
// as the keeper renews held locks: one call per lock every third of the waiters' liveness. A waiter
// that is not queued any more (handed the lock, or dropped while nobody kept it) is woken to ask.
type queueKeeper struct {
	redis    *redislock.Client
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
		gone, err := k.redis.KeepQueued(cctx, key, k.liveness, members...)
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

// send wakes the LockedJob named obj through a channel source.
func send(ctx context.Context, ch chan<- event.GenericEvent, obj types.NamespacedName) {
	lj := &batchv1alpha1.LockedJob{}
	lj.Namespace, lj.Name = obj.Namespace, obj.Name
	select {
	case ch <- event.GenericEvent{Object: lj}:
	case <-ctx.Done():
	}
}

// jitter spreads passes that were scheduled together: d/2 up to d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// enqueueAt enqueues the object of each generic event at priority p.
func enqueueAt(p int) handler.EventHandler {
	return handler.Funcs{GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		atPriority(q, p).Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
	}}
}

// atPriority makes Add use priority p, when the controller's queue is a priority queue.
func atPriority(q workqueue.TypedRateLimitingInterface[reconcile.Request], p int) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	return queueAt{PriorityQueue: pq, priority: p}
}

// queueAt raises every add to its priority. It overrides AddWithOpts too: controller-runtime's own
// handlers (EnqueueRequestForOwner among them) wrap the queue again and add through AddWithOpts
// with a priority of their own (none, or low for an unchanged object), which would undo ours.
type queueAt struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	priority int
}

func (q queueAt) Add(r reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, r) }

func (q queueAt) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil || *o.Priority < q.priority {
		o.Priority = &q.priority
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}
