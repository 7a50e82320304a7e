package lockedjob

import (
	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Naming a LockedJob's lock for the lock library.

// lockName is the lock's name in the lock library. A lock acquired before is named by the Redis key
// that status recorded at acquisition, so an operator upgraded to a new key layout still re-adopts
// and releases the lock it holds under the old one.
func (r *LockedJobReconciler) lockName(lj *batchv1alpha1.LockedJob) string {
	if lj.Status.FencingToken != nil && lj.Status.LockKey != "" {
		want := r.Config.Identity.LockKey(lj)
		if lj.Status.LockKey == r.Locks.RedisKey(want) {
			return want
		}
		if name, ok := r.Locks.LibraryKey(lj.Status.LockKey); ok {
			return name
		}
	}
	return r.Config.Identity.LockKey(lj)
}

// claim names this pass's LockedJob's lock for the lock book's Redis calls.
func (r *LockedJobReconciler) claim(p *pass) lockbook.Claim {
	id := r.Config.Identity
	return lockbook.Claim{Key: p.key, Token: id.Token(p.lj), Holder: id.Holder(p.lj), Permits: p.permits, Slot: p.lj.Status.Slot}
}
