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

// waiter is one waiting LockedJob, as the queue keeper needs it.
type waiter struct {
	obj    types.NamespacedName
	key    string // the lock's name in the lock library
	member string // its queue member (Identity.Holder)
}

// waitingSet is this operator's waiting LockedJobs: the queue keeper keeps them queued, and
// lockedjob_locks_pending counts them.
type waitingSet struct {
	mu  sync.Mutex
	set map[types.UID]waiter
}

func (s *waitingSet) add(uid types.UID, w waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[types.UID]waiter{}
	}
	s.set[uid] = w
	locksPending.Set(float64(len(s.set)))
}

func (s *waitingSet) remove(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, uid)
	locksPending.Set(float64(len(s.set)))
}

// removeObject drops a LockedJob that is gone, whatever its UID was.
func (s *waitingSet) removeObject(obj types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, w := range s.set {
		if w.obj == obj {
			delete(s.set, uid)
		}
	}
	locksPending.Set(float64(len(s.set)))
}

// byLock groups the waiters by lock, one KeepQueued call each.
func (s *waitingSet) byLock() map[string][]waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]waiter{}
	for _, w := range s.set {
		out[w.key] = append(out[w.key], w)
	}
	return out
}

// placeHint is what a lineup read after a handoff told of one waiter's place.
type placeHint struct {
	position int
	holder   string // the holder the lock was handed to
	at       time.Time
}

// hintMaxAge bounds how old a hint a pass trusts: a hint nobody took (the LockedJob went away) must
// not describe a later wait.
const hintMaxAge = 30 * time.Second

// placeHints holds, per queue member, the last place a lineup told, until the member's next pass
// takes it. A hint only spares a Redis call: a pass without one asks Redis as always.
type placeHints struct {
	mu    sync.Mutex
	hints map[string]placeHint
}

func (h *placeHints) put(member string, hint placeHint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hints == nil {
		h.hints = map[string]placeHint{}
	}
	if len(h.hints) > 1024 {
		for m, old := range h.hints {
			if hint.at.Sub(old.at) > hintMaxAge {
				delete(h.hints, m)
			}
		}
	}
	h.hints[member] = hint
}

// take returns and forgets the member's hint, if one is fresh enough.
func (h *placeHints) take(member string, now time.Time) (placeHint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hint, ok := h.hints[member]
	delete(h.hints, member)
	return hint, ok && now.Sub(hint.at) <= hintMaxAge
}

// drop forgets the member's hint: the lock was handed to it, and its next pass must claim it.
func (h *placeHints) drop(member string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.hints, member)
}

// queueKeeper keeps this operator's waiters in their queues while they do not ask Redis themselves,
// as the keeper renews held locks: one call per lock every third of the waiters' liveness. A waiter
// that is not queued any more (handed the lock, or dropped while nobody kept it) is woken to ask.
type queueKeeper struct {
	redis    *redislock.Client
	waiting  *waitingSet
	liveness time.Duration
	timeout  time.Duration // of one call
	wake     chan<- event.GenericEvent
}

// Start implements manager.Runnable; it runs only on the leader, whose passes fill the set.
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
		members := make([]string, len(waiters))
		for i, w := range waiters {
			members[i] = w.member
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
			for _, w := range waiters {
				if w.member == m {
					send(ctx, k.wake, w.obj)
				}
			}
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

type queueAt struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	priority int
}

func (q queueAt) Add(r reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &q.priority}, r)
}
