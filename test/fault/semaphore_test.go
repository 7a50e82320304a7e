//go:build fault

package fault

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/test/testkit"
)

// semaphorePermits is how many holders the semaphore scenarios' locks admit.
const semaphorePermits = 2

// permitsFinalizer is the finalizer an operator puts on a Lock or ClusterLock that declares more
// than one permit (controllers/lockview/lockview_controller.go): seeing it tells that the operator's cache
// holds the declaration, so its next acquisition passes the permits.
const permitsFinalizer = "batch.lockedjob.dev/permits"

// declarePermits creates the ClusterLock named after the scenario's lock with n permits in both
// clusters, and waits until both operators have put their finalizer on it: a LockedJob reconciled
// before its operator saw the ClusterLock would acquire a mutex.
func (r *run) declarePermits(n int) error {
	for _, c := range env.clusters {
		cl := &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: r.lock},
			Spec: batchv1alpha1.LockViewSpec{Permits: int32(n)}}
		if err := c.k8s.Create(r.ctx, cl); err != nil {
			return fmt.Errorf("create ClusterLock %s in %s: %w", r.lock, c.name, err)
		}
	}
	return poll(30*time.Second, func() (bool, string) {
		for _, c := range env.clusters {
			cl := &batchv1alpha1.ClusterLock{}
			if err := c.k8s.Get(r.ctx, client.ObjectKey{Name: r.lock}, cl); err != nil {
				return false, err.Error()
			}
			if !controllerutil.ContainsFinalizer(cl, permitsFinalizer) {
				return false, fmt.Sprintf("operator %s has not taken up ClusterLock %s (no finalizer %s)", c.name, r.lock, permitsFinalizer)
			}
		}
		return true, ""
	})
}

// dropPermits deletes the scenario's ClusterLock in both clusters and waits until both are gone,
// i.e. each operator removed its finalizer after setting the lock back to one permit; with every
// slot free by then, the lock is plain again: no :permits key is left in Redis.
func (r *run) dropPermits() error {
	for _, c := range env.clusters {
		cl := &batchv1alpha1.ClusterLock{ObjectMeta: metav1.ObjectMeta{Name: r.lock}}
		if err := c.k8s.Delete(r.ctx, cl); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete ClusterLock %s in %s: %w", r.lock, c.name, err)
		}
	}
	err := poll(30*time.Second, func() (bool, string) {
		for _, c := range env.clusters {
			err := c.k8s.Get(r.ctx, client.ObjectKey{Name: r.lock}, &batchv1alpha1.ClusterLock{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("ClusterLock %s still in cluster %s (its finalizer was not removed): %v", r.lock, c.name, err)
			}
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	return r.lockIsPlain()
}

// lockIsPlain reports an error when the scenario's lock still has permits in Redis.
func (r *run) lockIsPlain() error {
	rdb := redis.NewClient(&redis.Options{Addr: env.redis.Addr()})
	defer func() { _ = rdb.Close() }()
	key := slotKey(r.lock, 0) + ":permits"
	n, err := rdb.Exists(r.ctx, key).Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if n != 0 {
		return fmt.Errorf("%s is still in Redis after both ClusterLocks were deleted with every slot free", key)
	}
	return nil
}

// semaphoreBaseline: three LockedJobs per cluster on a lock of two permits, created together, no
// fault. Two run at a time, each slot one after the other with rising fences.
func semaphoreBaseline(r *run) (time.Time, error) {
	for _, c := range []*cluster{env.clusters["a"], env.clusters["b"]} {
		for i := 1; i <= 3; i++ {
			if err := r.create(c, fmt.Sprintf("%s%d", c.name, i), testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
				return time.Time{}, err
			}
		}
	}
	return r.start, nil
}

// semaphoreFull judges semaphore-baseline beyond the checker's rules (which already fail more
// than two holders at once): a semaphore that never admitted two at once is a broken semaphore,
// not a safe one; every LockedJob succeeded; and every holder had a slot below the permits.
func semaphoreFull(_ *run, h history) []string {
	var fails []string
	if most, _, _ := crowding(h.Pods, h.permits()); most < h.permits() {
		fails = append(fails, fmt.Sprintf("never more than %d holder(s) running at once on a lock of %d permits", most, h.permits()))
	}
	for _, l := range h.Claimants {
		if l.Phase != string(batchv1alpha1.PhaseSucceeded) {
			fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded", l.holder(), l.Phase, l.Message))
		}
	}
	return append(fails, slotsBelowPermits(h)...)
}

// slotsBelowPermits lists the Jobs whose slot is not one of the lock's.
func slotsBelowPermits(h history) []string {
	var fails []string
	for _, j := range h.Jobs {
		if j.Slot < 0 || j.Slot >= h.permits() {
			fails = append(fails, fmt.Sprintf("%s/%s runs in slot %d of a lock of %d permits", j.Cluster, j.Name, j.Slot, h.permits()))
		}
	}
	return fails
}

// readoptTTL is a2's ttl in semaphore-operator-a-sigkill: renewed every ttl/3, its lease outlives
// the ~4.5 s from the SIGKILL until the successor leads by 2 s or more, so the successor finds it
// held and may re-adopt it, while a1's ttl of 3 s ends before.
const readoptTTL = 10 * time.Second

// semaphoreOperatorKill: a1 and a2 in cluster a hold both slots of the semaphore and run 6 s, b1
// and b2 in cluster b wait; operator a is SIGKILLed and started again at once (its successor leads
// once the fast leader lease ran out). By then a1's lease (ttl 3 s) has ended and b1 may have taken
// its slot; a2's (ttl 10 s) usually still runs, for the successor to re-adopt in its slot. Either
// may end by its loss policy instead. Overlaps are allowed, as in operator-a-sigkill; each slot's
// fence must protect.
func semaphoreOperatorKill(r *run) (time.Time, error) {
	a, b := env.clusters["a"], env.clusters["b"]
	for name, o := range map[string]testkit.LockedJobOptions{"a1": {Run: 6 * time.Second}, "a2": {Run: 6 * time.Second, TTL: readoptTTL}} {
		if err := r.create(a, name, o); err != nil {
			return time.Time{}, err
		}
	}
	for _, name := range []string{"a1", "a2"} {
		if err := r.waitRunning(a, name); err != nil {
			return time.Time{}, err
		}
	}
	for _, name := range []string{"b1", "b2"} {
		if err := r.create(b, name, testkit.LockedJobOptions{Run: 2 * time.Second}); err != nil {
			return time.Time{}, err
		}
	}
	for _, name := range []string{"b1", "b2"} {
		if err := r.waitWaiting(b, name); err != nil {
			return time.Time{}, err
		}
	}
	return killAndRestart("a")
}

// keptSlotOrLost judges semaphore-operator-a-sigkill: a1 and a2 were re-adopted in the slots
// their Jobs run in (they end Succeeded, still recording that slot) or ended per their loss policy
// (LockLost, onLockLost: Suspend); b1 and b2 succeeded; every slot was one of the lock's.
func keptSlotOrLost(r *run, h history) []string {
	fails := slotsBelowPermits(h)
	a := env.clusters["a"]
	for _, name := range []string{"a1", "a2"} {
		lj := &batchv1alpha1.LockedJob{}
		if err := a.k8s.Get(r.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, lj); err != nil {
			fails = append(fails, fmt.Sprintf("get a/%s: %v", name, err))
			continue
		}
		slots := jobSlots(h, holder("a", r.ns, name))
		if err := keptSlot(lj, slots); err != nil {
			fails = append(fails, fmt.Sprintf("a/%s: %v", name, err))
			continue
		}
		logf("%s: a/%s ended %s; its Job ran in slot %v", r.sc.name, name, lj.Status.Phase, slots)
	}
	for _, l := range h.Claimants {
		if l.Cluster == "b" && l.Phase != string(batchv1alpha1.PhaseSucceeded) {
			fails = append(fails, fmt.Sprintf("%s ended %s (%s), want Succeeded", l.holder(), l.Phase, l.Message))
		}
	}
	return fails
}

// jobSlots returns the slots of the holder's Jobs, in the order they appeared.
func jobSlots(h history, holderName string) []int {
	var slots []int
	for _, j := range h.Jobs {
		if j.holder() == holderName {
			slots = append(slots, j.Slot)
		}
	}
	return slots
}

// keptSlot checks one holder of operator a after the kill: LockLost is its loss policy at work;
// Succeeded means it was re-adopted, which must have been in its Job's slot.
func keptSlot(lj *batchv1alpha1.LockedJob, slots []int) error {
	if len(slots) != 1 {
		return fmt.Errorf("%d Jobs (slots %v), want one", len(slots), slots)
	}
	switch lj.Status.Phase {
	case batchv1alpha1.PhaseLockLost:
		return nil
	case batchv1alpha1.PhaseSucceeded:
		if lj.Status.Slot == nil {
			return errors.New("succeeded without a slot in its status")
		}
		if int(*lj.Status.Slot) != slots[0] {
			return fmt.Errorf("re-adopted in slot %d, but its Job runs in slot %d", *lj.Status.Slot, slots[0])
		}
		return nil
	default:
		return fmt.Errorf("ended %s (%s), want LockLost or Succeeded in its slot", lj.Status.Phase, lj.Status.Message)
	}
}

// semaphoreHolders: a1 and a2 (LockedJobs) in a hold both slots of a semaphore of
// semaphorePermits; b1 and b2 in b wait. The scenario must declare the permits.
var semaphoreHolders = cast{
	setUp:     (*run).slotHoldersAndWaiters,
	holderJob: lockedJobs.holderJob,
	holder:    lockedJobs.holder,
	claimant:  lockedJobs.claimant,
}

// slotHoldersAndWaiters creates a1 and a2 (their pods run for holderRun, shaped by o) and waits
// until both run, one per slot, then b1 and b2 and waits until they wait.
func (r *run) slotHoldersAndWaiters(holderRun time.Duration, o testkit.LockedJobOptions) error {
	a, b := env.clusters["a"], env.clusters["b"]
	o.Run = holderRun
	for _, name := range []string{"a1", "a2"} {
		if err := r.create(a, name, o); err != nil {
			return err
		}
	}
	for _, name := range []string{"a1", "a2"} {
		if err := r.waitRunning(a, name); err != nil {
			return err
		}
	}
	for _, name := range []string{"b1", "b2"} {
		if err := r.create(b, name, testkit.LockedJobOptions{Run: 2 * time.Second, TTL: o.TTL}); err != nil {
			return err
		}
	}
	for _, name := range []string{"b1", "b2"} {
		if err := r.waitWaiting(b, name); err != nil {
			return err
		}
	}
	return nil
}

// keptSlotsThroughReshard judges semaphore-redis-reshard: as keptThroughReshard, and every holder
// had one of the semaphore's slots.
func keptSlotsThroughReshard(r *run, h history) []string {
	return append(keptThroughReshard(r, h), slotsBelowPermits(h)...)
}
