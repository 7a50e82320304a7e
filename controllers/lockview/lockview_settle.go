package lockview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// The view as the one writer of a lock's permits in Redis: settling them from the declaration, and
// refusing them while an older client shares the Redis. Retiring them when the declaration goes is
// lockview_retire.go.

// settlePermits makes Redis keep the permits the object declares. The view is the one writer of a
// lock's permits in Redis (acquisitions only read them), and the holder of the finalizer: an object
// that declares more than one gets the finalizer before its number is written, so its deletion
// always sets the lock back to one (see retire). The number is written on every pass, not once per
// generation, so Redis comes back to the declaration whatever changed it behind the view's back (a
// Redis that lost its data, an older operator's acquisition that wrote its own number).
func (r *LockViewReconciler) settlePermits(ctx context.Context, obj client.Object, key string) (admitted int, err error) {
	n := locks.Permits(obj)
	if n > 1 && !controllerutil.ContainsFinalizer(obj, permitsFinalizer) {
		controllerutil.AddFinalizer(obj, permitsFinalizer)
		if err := r.Update(ctx, obj); err != nil {
			return 0, fmt.Errorf("add finalizer to lock %s: %w", key, err)
		}
	}
	if r.Locks.Admits(n) < n {
		return 1, nil // Redlock: its LockedJobs wait, and the view says why
	}
	if n > 1 {
		if err := r.awaitAnnouncement(ctx); err != nil {
			return 0, fmt.Errorf("settle the permits of lock %s: %w", key, err)
		}
		if len(r.olderClients()) > 0 {
			n = 1 // an older client's plain scripts would take slot 0 while the permits are held
		}
	}
	return n, r.setPermits(ctx, key, n)
}

// announce tells the Redis, every Announce, that this process speaks lockbook.Protocol, and
// learns who speaks an older one. When that changes (and after the first announcement), every
// declared lock is settled again: a semaphore's permits are stored only while no client of the
// Redis announces a protocol that would not honour them. A client that never announces (one from
// before the announcements) is not seen; docs/design.md, "Upgrades", says how to leave none.
func (r *LockViewReconciler) announce(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("member", r.Member)
	for {
		rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
		all, err := r.Locks.Announce(rctx, r.Member, 4*r.Announce)
		cancel()
		if err != nil {
			log.Error(err, "Announcing the lock protocol failed; trying again after the announce period")
		} else if r.setOlderClients(older(all)) {
			log.Info("Settling every declared lock again: the clients of older lock protocols changed", "older", older(all))
			r.settleAll(ctx)
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.RedisTimeout)
			defer cancel()
			if err := r.Locks.Withdraw(wctx, r.Member); err != nil {
				log.Error(err, "Withdrawing the lock protocol's announcement failed; it lapses with its lease")
			}
			return nil
		case <-time.After(r.Announce):
		}
	}
}

// awaitAnnouncement waits, at most RedisTimeout, for the first announcement to be answered: until
// then nobody knows whether a semaphore is safe on this Redis.
func (r *LockViewReconciler) awaitAnnouncement(ctx context.Context) error {
	t := time.NewTimer(r.RedisTimeout)
	defer t.Stop()
	select {
	case <-r.announced:
		return nil
	case <-t.C:
		return errors.New("this operator's lock protocol has not been announced to Redis yet")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// older keeps the clients whose protocol cannot honour a semaphore.
func older(all []lockbook.Announced) []lockbook.Announced {
	return slices.DeleteFunc(slices.Clone(all), func(a lockbook.Announced) bool { return a.Protocol >= lockbook.SemaphoreProtocol })
}

// olderClients returns the clients of older lock protocols as of the last announcement (none
// before the first: settlePermits waits for it).
func (r *LockViewReconciler) olderClients() []lockbook.Announced {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind == nil {
		return nil
	}
	return *r.behind
}

// setOlderClients records behind and reports whether it changed (or was not known before).
func (r *LockViewReconciler) setOlderClients(behind []lockbook.Announced) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.behind != nil && slices.Equal(*r.behind, behind) {
		return false
	}
	if r.behind == nil {
		close(r.announced)
	}
	r.behind = &behind
	return true
}

// settleAll sends every declared Lock and ClusterLock to its controller.
func (r *LockViewReconciler) settleAll(ctx context.Context) {
	var lockList batchv1alpha1.LockList
	var clusterLocks batchv1alpha1.ClusterLockList
	if err := r.List(ctx, &lockList); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Locks to settle failed")
	}
	if err := r.List(ctx, &clusterLocks); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing ClusterLocks to settle failed")
	}
	send := func(ch chan event.GenericEvent, obj client.Object) bool {
		select {
		case ch <- event.GenericEvent{Object: obj}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := range lockList.Items {
		if !send(r.orphanLocks, &lockList.Items[i]) {
			return
		}
	}
	for i := range clusterLocks.Items {
		if !send(r.orphanClusterLocks, &clusterLocks.Items[i]) {
			return
		}
	}
}

// setPermits is the view's one write of a lock's permits (settle and retire both write through it).
func (r *LockViewReconciler) setPermits(ctx context.Context, key string, n int) error {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	defer cancel()
	if err := r.Locks.SetPermits(rctx, key, n); err != nil {
		return fmt.Errorf("set the permits of lock %s to %d: %w", key, n, err)
	}
	return nil
}
