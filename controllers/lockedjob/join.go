package lockedjob

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Joining: a LockedJob stands in its lock's queue as soon as the operator sees it created, outside
// the work queue, before its first pass (docs/design.md, Scale, item 13).
//
// A first pass costs three API requests (the finalizer, the Job's dry run, the status), and in a
// burst the first passes wait in one work queue: LockedJobs that asked for their lock only in that
// pass reached its queue seconds after its holder's Job had ended, and the release found nobody to
// hand the lock to. A joiner takes each new LockedJob from the create event and stands it in line
// with one script and no write, so the release hands the lock straight to the next LockedJob,
// whose pass is woken at once. Joining takes nothing, not even a free lock: a lock is taken only by
// a pass under the finalizer that releases it. A lock handed to a LockedJob that joined is held for
// nobody until it claims it, at most the lesser of its ttl and the waiter's liveness, as for every
// queued waiter.
//
// The first pass of a LockedJob comes after its join has answered: until then its passes do
// nothing (the joiner enqueues it when done), so a join never lands behind a pass that went on, took
// the lock and released it. One that stood behind a holder has the rest of its first pass at low
// priority: the passes that release and hand over locks go first, and so do the first passes of the
// LockedJobs whose lock is free.

const (
	// joinWorkers is how many joins run at once: each is one script of well under a millisecond
	// on a local Redis, so a few keep up with the API server's creates.
	joinWorkers = 4
	// joinBacklog is how many created LockedJobs may wait for a joiner; beyond it, one goes
	// straight to its first pass, which asks for the lock as before.
	joinBacklog = 4096
)

// joiner stands created LockedJobs in their locks' queues (see above). It runs only on the leader,
// as a manager runnable.
type joiner struct {
	r  *LockedJobReconciler
	in chan joinAsk

	mu      sync.Mutex
	pending map[types.NamespacedName]bool // handed to the joiner, join not answered yet
}

// joinAsk is one created LockedJob and the work queue its first pass goes to.
type joinAsk struct {
	lj *batchv1alpha1.LockedJob
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func newJoiner(r *LockedJobReconciler) *joiner {
	return &joiner{r: r, in: make(chan joinAsk, joinBacklog), pending: map[types.NamespacedName]bool{}}
}

// joinable reports whether a created LockedJob joins before its first pass: it never asked for its
// lock (no finalizer, no status), it is not being deleted, its namespace may take a lock of its
// scope, and the lock library hands locks over (not Redlock).
func (r *LockedJobReconciler) joinable(lj *batchv1alpha1.LockedJob) bool {
	return r.Locks.HandsOff() && lj.DeletionTimestamp == nil &&
		!controllerutil.ContainsFinalizer(lj, finalizer) &&
		lj.Status.WaitingSince == nil && lj.Status.Phase == "" &&
		r.Config.ClusterScopeNamespaces.Allows(locks.ClaimantOf(lj))
}

// notJoinable passes the create events of the LockedJobs that do not join to the default handler
// of For; the joiner enqueues the others (onCreate).
func (j *joiner) notJoinable() predicate.Predicate {
	return predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
		lj, ok := e.Object.(*batchv1alpha1.LockedJob)
		return !ok || !j.r.joinable(lj)
	}}
}

// onCreate hands each joinable created LockedJob to the joiner, or, when its backlog is full,
// straight to the work queue as For's handler would.
func (j *joiner) onCreate() handler.EventHandler {
	return handler.Funcs{CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		lj, ok := e.Object.(*batchv1alpha1.LockedJob)
		if !ok || !j.r.joinable(lj) {
			return
		}
		key := client.ObjectKeyFromObject(lj)
		j.mu.Lock()
		if j.pending[key] {
			j.mu.Unlock()
			return
		}
		j.pending[key] = true
		j.mu.Unlock()
		select {
		case j.in <- joinAsk{lj: lj, q: q}:
		default:
			j.answered(key)
			q.Add(reconcile.Request{NamespacedName: key})
		}
	}}
}

// joining reports whether obj's join has not answered yet: its pass waits for the joiner, which
// enqueues it then. Safe on a nil joiner (a reconciler not set up with a manager).
func (j *joiner) joining(obj types.NamespacedName) bool {
	if j == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending[obj]
}

func (j *joiner) answered(obj types.NamespacedName) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.pending, obj)
}

// Start implements manager.Runnable.
func (j *joiner) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range joinWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case a := <-j.in:
					j.serve(ctx, a)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// serve joins one LockedJob and then enqueues its first pass at the priority the join earned.
func (j *joiner) serve(ctx context.Context, a joinAsk) {
	key := client.ObjectKeyFromObject(a.lj)
	priority := j.r.join(ctx, a.lj)
	j.answered(key)
	req := reconcile.Request{NamespacedName: key}
	if pq, ok := a.q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, req)
		return
	}
	a.q.Add(req)
}

// join stands lj in its lock's queue and returns the priority of its first pass: low when it
// stands behind a holder or another waiter (the wait book then knows it, so the queue keeper keeps
// it in line and a handoff to it is timed), the default when its lock is free for it, or when
// anything went wrong: the first pass then asks Redis as it always did.
func (r *LockedJobReconciler) join(ctx context.Context, lj *batchv1alpha1.LockedJob) int {
	claimant := locks.ClaimantOf(lj)
	permits, err := r.permits.Of(ctx, claimant)
	if err != nil {
		return 0
	}
	claim := r.claimOf(lj)
	claim.Permits = permits
	rctx, cancel := r.redisCtx(ctx)
	err = r.Locks.Join(rctx, claim, ttlOf(lj), r.Config.Identity.QueueScore(claimant), r.Config.waiterLiveness())
	cancel()
	qe, queued := errors.AsType[*lockbook.QueuedError](err)
	if !queued || qe.Free {
		return 0
	}
	r.waiting.Waiting(claim.Holder, client.ObjectKeyFromObject(lj), claim.Key, r.Clock.Now(), handler.LowPriority)
	return handler.LowPriority
}

// leaveQueues takes the members of a LockedJob that is gone out of their locks' queues. One that
// joined and was deleted before its first pass had no finalizer to dequeue it: its place would
// last its liveness, and a lock handed to it would wait as long for nobody. Best effort: the
// liveness still bounds what a failed call leaves. A lock it claimed is never given back here,
// since the claim removed the ticket Dequeue gives a lock back by (and a claim needs the
// finalizer, so the LockedJob could not be gone while holding it).
func (r *LockedJobReconciler) leaveQueues(ctx context.Context, forgot []waitbook.Standing) {
	for _, s := range forgot {
		rctx, cancel := r.redisCtx(ctx)
		if err := r.Locks.Dequeue(rctx, lockbook.Claim{Key: s.Key, Holder: s.Member}); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Could not leave the queue of a LockedJob that is gone", "lock", s.Key, "error", err.Error())
		}
		cancel()
	}
}

// leaveJoinedQueue takes a LockedJob that will never ask for its lock (its Job is refused) out of
// the queue it may have joined, giving a lock handed to it to the next waiter. Best effort, as in
// leaveQueues.
func (r *LockedJobReconciler) leaveJoinedQueue(ctx context.Context, p *pass) {
	if !r.Locks.HandsOff() {
		return // nothing was joined
	}
	r.waiting.Done(p.claim.Holder)
	r.leaveQueues(ctx, []waitbook.Standing{{Member: p.claim.Holder, Key: p.claim.Key}})
}
