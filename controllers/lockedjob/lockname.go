package lockedjob

import (
	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Naming a LockedJob's lock for the lock library.

// lockName is the lock's name in the lock library. A lock acquired before is named by the Redis key
// that status recorded at acquisition, so an operator upgraded to a new key layout still re-adopts
// and releases the lock it holds under the old one.
func (r *LockedJobReconciler) lockName(lj *batchv1alpha1.LockedJob) string {
	if lj.Status.FencingToken != nil && lj.Status.LockKey != "" {
		want := r.Config.Identity.LockKey(locks.ClaimantOf(lj))
		if lj.Status.LockKey == r.Locks.RedisKey(want) {
			return want
		}
		if name, ok := r.Locks.LibraryKey(lj.Status.LockKey); ok {
			return name
		}
	}
	return r.Config.Identity.LockKey(locks.ClaimantOf(lj))
}

// claimOf names lj's lock for the lock book: its key, lj's token and holder name.
func (r *LockedJobReconciler) claimOf(lj *batchv1alpha1.LockedJob) lockbook.Claim {
	id, c := r.Config.Identity, locks.ClaimantOf(lj)
	return lockbook.Claim{Key: r.lockName(lj), Token: id.Token(c), Holder: id.Holder(c)}
}

// workloadOf is what the lock book knows of lj: enough to stop its Job and wake this reconciler.
func workloadOf(lj *batchv1alpha1.LockedJob) lockbook.Workload {
	return lockbook.WorkloadOf(locks.ClaimantOf(lj), lj.Status.JobName)
}

// lockedJobOf names the book's workload as the LockedJob it is, for Events and the Job's lookup.
func lockedJobOf(w lockbook.Workload) *batchv1alpha1.LockedJob {
	lj := &batchv1alpha1.LockedJob{}
	lj.Namespace, lj.Name, lj.UID = w.Object.Namespace, w.Object.Name, w.UID
	return lj
}

// lockClaim is the pass's claim for a Redis call, with what the pass has learnt since it started:
// the permits it read, and the slot status records.
func (p *pass) lockClaim() lockbook.Claim {
	c := p.claim
	c.Permits, c.Slot, c.Fence = p.permits, p.lj.Status.Slot, derefInt64(p.lj.Status.FencingToken)
	return c
}
