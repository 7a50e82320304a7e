package lockedjob

import (
	"context"
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/lockedjob/lockedjob/controllers/internal/waitbook"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Joining (stepJoin): a LockedJob seen for the first time stands in its lock's queue before its
// pass writes anything (docs/design.md, "A burst").
//
// A first pass costs three API requests (the finalizer, the Job's dry run, the status) and a
// burst's first passes wait in one work queue, so, asking for the lock only after them, the
// LockedJobs behind a lock's holder reached its queue seconds after the holder's Job had ended:
// the release found nobody to hand the lock to. Joining costs one script and no write, so every
// LockedJob of a burst stands in line within moments of its creation, and the release hands the
// lock straight to the next one. Joining takes nothing, not even a free lock: a lock is held only
// under the finalizer that releases it, so a LockedJob that finds its lock free goes on with the
// first pass as before.

// joinRecheck is how soon a LockedJob that joined behind a holder has the rest of its first pass
// (finalizer, dry run, status): at once when nothing else waits, and after every pass that starts
// or ends a Job when a burst fills the work queue, since it goes at handler.LowPriority.
const joinRecheck = 100 * time.Millisecond

// join stands the LockedJob in its lock's queue. next is false when it stood behind a holder or
// another waiter: the rest of its first pass comes later at low priority, or when a release hands
// it the lock. Anything else (a free lock, a lock handed to it before, Redis not answering, the
// lock's permits unknown) goes on with the first pass in this one, which asks Redis as before.
func (r *LockedJobReconciler) join(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	p.obs.mayJoin = false
	lj := p.lj
	permits, err := r.permits.Of(ctx, locks.ClaimantOf(lj))
	if err != nil {
		return ctrl.Result{}, true, nil
	}
	p.permits = permits
	rctx, cancel := r.redisCtx(ctx)
	err = r.Locks.Join(rctx, p.lockClaim(), ttlOf(lj), r.Config.Identity.QueueScore(locks.ClaimantOf(lj)), r.Config.waiterLiveness())
	cancel()
	qe, queued := errors.AsType[*lockbook.QueuedError](err)
	if !queued || qe.Free {
		return ctrl.Result{}, true, nil
	}
	// The queue keeper keeps it in line, a release that hands it the lock wakes it at once.
	priority := handler.LowPriority
	r.waiting.Waiting(p.claim.Holder, client.ObjectKeyFromObject(lj), p.claim.Key, r.Clock.Now().Add(joinRecheck), priority)
	return ctrl.Result{RequeueAfter: joinRecheck, Priority: &priority}, false, nil
}

// leaveQueues takes the members of a LockedJob that is gone out of their locks' queues. One that
// joined and was deleted before its first write had no finalizer to dequeue it: its place would
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
// the queue it may have joined before its first write, giving a lock handed to it to the next
// waiter. Best effort, as in leaveQueues.
func (r *LockedJobReconciler) leaveJoinedQueue(ctx context.Context, p *pass) {
	if !r.Locks.HandsOff() {
		return // nothing was joined
	}
	r.waiting.Done(p.claim.Holder)
	r.leaveQueues(ctx, []waitbook.Standing{{Member: p.claim.Holder, Key: p.claim.Key}})
}
