package plugin

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// LockView is one lock as `kubectl lockedjob locks` shows it. It has no token field on purpose:
// the lock token proves ownership in Redis and must never be shown (LockedJob status has none).
type LockView struct {
	// Lock is spec.lock.name.
	Lock string `json:"lock"`
	// Scope is spec.lock.scope.
	Scope batchv1alpha1.LockScope `json:"scope"`
	// Namespace is the lock's namespace; empty for scope Cluster, whose LockedJobs may sit anywhere.
	Namespace string `json:"namespace,omitempty"`
	// Permits is how many may hold the lock at once: spec.permits of the Lock (or ClusterLock)
	// that declares it, else 1.
	Permits int `json:"permits"`
	// InUse is how many hold it now, as far as the source knows: the length of Holders.
	InUse int `json:"inUse"`
	// Holders are who hold the lock now, lowest slot first: one for a plain lock, up to Permits
	// (more, for a while, after Permits was lowered) for a semaphore.
	Holders []Holder `json:"holders,omitempty"`
	// Holder is the first of Holders, or nil when nobody is known to hold the lock. It is what the
	// view had before semaphores, and what it still means for a plain lock, so scripts that read
	// holder keep working; read holders for a semaphore.
	Holder *Holder `json:"holder,omitempty"`
	// Waiting counts the LockedJobs of the lock in phase Waiting.
	Waiting int `json:"waiting"`
	// Head is the waiter whose status says it is next (status.queuePosition 1).
	Head *Ref `json:"head,omitempty"`
	// LastHandoff is the latest release that passed the lock to a waiter, as far as status tells it.
	LastHandoff *Handoff `json:"lastHandoff,omitempty"`
	// Source says where holder, waiting and head come from: "Lock" or "ClusterLock" when the lock
	// is declared and its status (read from Redis by the operator) was used, else "LockedJobs"
	// (derived from their status).
	Source string `json:"source"`
}

// Sources of a LockView.
const (
	sourceLockedJobs  = "LockedJobs"
	sourceLock        = "Lock"
	sourceClusterLock = "ClusterLock"
)

// Ref names a LockedJob; or, for a head of the queue that is no LockedJob in view (another
// cluster's), only its name in Redis.
type Ref struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Identity is the waiter's name in Redis (cluster/namespace/name/uid) when Name is empty.
	Identity string `json:"identity,omitempty"`
}

// Holder is the holder of a lock: a LockedJob whose condition LockAcquired is True, or, when no
// LockedJob in view holds it (a holder in a namespace the user cannot list, or in another cluster
// sharing the Redis), the holder name the waiters read from Redis (status.blockedBy).
type Holder struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Identity is the holder's name in Redis (cluster/namespace/name/uid), set only when no
	// LockedJob in view holds the lock.
	Identity string `json:"identity,omitempty"`
	// Slot is the semaphore slot it holds (status.slot, or the Lock's status.holders[].slot), when
	// the operator acquired the lock as a semaphore: the fencing token orders it only against the
	// earlier holders of this slot.
	Slot *int32 `json:"slot,omitempty"`
	// FencingToken is the holder's fencing token (status.fencingToken); not a secret.
	FencingToken *int64 `json:"fencingToken,omitempty"`
	// AcquiredAt is when it acquired the lock (status.acquiredAt).
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`
}

// Handoff is a release that passed the lock from one LockedJob to a waiter.
type Handoff struct {
	From       Ref         `json:"from"`
	To         Ref         `json:"to"`
	ReleasedAt metav1.Time `json:"releasedAt"`
	AcquiredAt metav1.Time `json:"acquiredAt"`
}

// lockID tells locks apart: a Namespace-scoped name is one lock per namespace, a Cluster-scoped
// name one lock everywhere.
type lockID struct {
	scope     batchv1alpha1.LockScope
	namespace string
	name      string
}

func lockOf(lj *batchv1alpha1.LockedJob) lockID {
	if lj.Spec.Lock.Scope == batchv1alpha1.LockScopeCluster {
		return lockID{scope: batchv1alpha1.LockScopeCluster, name: lj.Spec.Lock.Name}
	}
	// An object the API server defaulted has a scope; one written before defaulting may not.
	return lockID{scope: batchv1alpha1.LockScopeNamespace, namespace: lj.Namespace, name: lj.Spec.Lock.Name}
}

// listLocks is the one place that knows where the per-lock view comes from: the LockedJobs' status
// (DeriveLocks), and, for a lock declared as a Lock or ClusterLock (issue 11, part 2), that
// resource's status, which the operator reads from Redis (OverlayDeclared). namespace "" lists
// every namespace. warnings say what could not be seen.
func listLocks(ctx context.Context, c client.Reader, namespace string) (views []LockView, warnings []string, err error) {
	ljs, warnings, err := listLockedJobs(ctx, c, namespace)
	if err != nil {
		return nil, nil, err
	}
	views = DeriveLocks(ljs)
	declared, more, err := listDeclared(ctx, c, namespace, views)
	if err != nil {
		return nil, nil, err
	}
	return OverlayDeclared(views, ljs, declared), append(warnings, more...), nil
}

// listLockedJobs lists the LockedJobs of namespace ("" for all), plus, for Cluster-scoped locks
// used there, their LockedJobs in other namespaces: who holds a shared lock is often elsewhere.
// Without the right to list every namespace, it says so in a warning and shows what it can.
func listLockedJobs(ctx context.Context, c client.Reader, namespace string) ([]batchv1alpha1.LockedJob, []string, error) {
	var list batchv1alpha1.LockedJobList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, nil, fmt.Errorf("list LockedJobs: %w", err)
	}
	if namespace == "" {
		return list.Items, nil, nil
	}
	shared := map[string]bool{}
	for i := range list.Items {
		if id := lockOf(&list.Items[i]); id.scope == batchv1alpha1.LockScopeCluster {
			shared[id.name] = true
		}
	}
	if len(shared) == 0 {
		return list.Items, nil, nil
	}
	var all batchv1alpha1.LockedJobList
	if err := c.List(ctx, &all); err != nil {
		if apierrors.IsForbidden(err) {
			return list.Items, []string{fmt.Sprintf("cannot list LockedJobs in all namespaces, so Cluster-scoped locks show only namespace %s: %v", namespace, err)}, nil
		}
		return nil, nil, fmt.Errorf("list LockedJobs of Cluster-scoped locks: %w", err)
	}
	items := list.Items
	for i := range all.Items {
		lj := &all.Items[i]
		if id := lockOf(lj); lj.Namespace != namespace && id.scope == batchv1alpha1.LockScopeCluster && shared[id.name] {
			items = append(items, *lj)
		}
	}
	return items, nil, nil
}

// DeriveLocks groups LockedJobs by lock and reads, from their status, who holds each lock, how many
// wait, who is next and the last handoff. It is a pure function of the objects; status is what the
// operator last recorded, so it can lag Redis by one pass.
func DeriveLocks(ljs []batchv1alpha1.LockedJob) []LockView {
	groups := map[lockID][]*batchv1alpha1.LockedJob{}
	for i := range ljs {
		id := lockOf(&ljs[i])
		groups[id] = append(groups[id], &ljs[i])
	}
	views := make([]LockView, 0, len(groups))
	for id, members := range groups {
		views = append(views, deriveLock(id, members))
	}
	sortViews(views)
	return views
}

func sortViews(views []LockView) {
	slices.SortFunc(views, func(a, b LockView) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Lock, b.Lock), cmp.Compare(a.Scope, b.Scope))
	})
}

func deriveLock(id lockID, members []*batchv1alpha1.LockedJob) LockView {
	v := LockView{Lock: id.name, Scope: id.scope, Namespace: id.namespace, Source: sourceLockedJobs, Permits: 1}
	waiters := waitersInQueueOrder(members)
	v.Waiting = len(waiters)
	v.setHolders(holdersOf(members, waiters))
	for _, w := range waiters {
		if p := w.Status.QueuePosition; p != nil && *p == 1 {
			v.Head = &Ref{Namespace: w.Namespace, Name: w.Name}
			break
		}
	}
	v.LastHandoff = lastHandoff(members)
	return v
}

// setHolders sets Holders, InUse and Holder together, so they never disagree. No holders is nil,
// whichever way it was built.
func (v *LockView) setHolders(holders []Holder) {
	v.Holders, v.InUse, v.Holder = nil, len(holders), firstOf(holders)
	if len(holders) > 0 {
		v.Holders = holders
	}
}

// firstOf is a copy of the first holder, or nil.
func firstOf(holders []Holder) *Holder {
	if len(holders) == 0 {
		return nil
	}
	first := holders[0]
	return &first
}

// semaphore reports whether the lock admits more than one holder, or still has a holder in a slot
// above 0 after its permits were lowered: then each holder's slot matters.
func (v *LockView) semaphore() bool {
	return v.Permits > 1 || slotsAbove0(v.Holders)
}

func slotsAbove0(holders []Holder) bool {
	return slices.ContainsFunc(holders, func(h Holder) bool { return h.Slot != nil && *h.Slot > 0 })
}

// holdersOf are the LockedJobs that say they hold the lock (condition LockAcquired True), one per
// slot, lowest slot first (a plain lock has only slot 0). Should two say so of one slot for a
// moment (the old holder's status not yet written), the higher fencing token is the later holder:
// tokens rise within a slot. With none, the holder the waiters saw in Redis, the head's view first.
func holdersOf(members, waitersInOrder []*batchv1alpha1.LockedJob) []Holder {
	bySlot := map[int32]*batchv1alpha1.LockedJob{}
	for _, lj := range members {
		if !meta.IsStatusConditionTrue(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired) {
			continue
		}
		slot := slotOf(lj)
		if held := bySlot[slot]; held == nil || fence(lj) > fence(held) {
			bySlot[slot] = lj
		}
	}
	holders := make([]Holder, 0, len(bySlot))
	for _, slot := range slices.Sorted(maps.Keys(bySlot)) {
		lj := bySlot[slot]
		holders = append(holders, Holder{Namespace: lj.Namespace, Name: lj.Name, Slot: lj.Status.Slot,
			FencingToken: lj.Status.FencingToken, AcquiredAt: lj.Status.AcquiredAt})
	}
	if len(holders) > 0 {
		return holders
	}
	for _, w := range waitersInOrder {
		if w.Status.BlockedBy != "" {
			return []Holder{{Identity: w.Status.BlockedBy}}
		}
	}
	return nil
}

// slotOf is the slot lj holds; a plain lock's holder (no status.slot) holds slot 0, whose keys a
// plain lock shares with a semaphore's first slot.
func slotOf(lj *batchv1alpha1.LockedJob) int32 {
	if lj.Status.Slot == nil {
		return 0
	}
	return *lj.Status.Slot
}

func fence(lj *batchv1alpha1.LockedJob) int64 {
	if lj.Status.FencingToken == nil {
		return -1
	}
	return *lj.Status.FencingToken
}

// waitersInQueueOrder are the members in phase Waiting, in the order the operator's queue serves
// them (locks.QueueCompare).
func waitersInQueueOrder(members []*batchv1alpha1.LockedJob) []*batchv1alpha1.LockedJob {
	var waiters []*batchv1alpha1.LockedJob
	for _, lj := range members {
		if lj.Status.Phase == batchv1alpha1.PhaseWaiting {
			waiters = append(waiters, lj)
		}
	}
	slices.SortFunc(waiters, queueCompare)
	return waiters
}

// queueCompare is locks.QueueCompare for LockedJobs.
func queueCompare(a, b *batchv1alpha1.LockedJob) int {
	return locks.QueueCompare(locks.ClaimantOf(a), locks.ClaimantOf(b))
}

// lastHandoff is the latest acquisition by a LockedJob that was already waiting when another
// LockedJob of the lock released it: the release passed the lock on. An acquisition after a lease
// expired (a lost lock has no releasedAt) is not a handoff. Times have second precision, so a
// release and the acquisition it allowed may carry the same second.
func lastHandoff(members []*batchv1alpha1.LockedJob) *Handoff {
	var last *Handoff
	for _, to := range members {
		acquired := to.Status.AcquiredAt
		if acquired == nil || to.Status.WaitingSince == nil {
			continue
		}
		from := lastReleaseBefore(members, to)
		if from == nil || to.Status.WaitingSince.After(from.Status.ReleasedAt.Time) {
			continue
		}
		if last == nil || acquired.After(last.AcquiredAt.Time) {
			last = &Handoff{
				From:       Ref{Namespace: from.Namespace, Name: from.Name},
				To:         Ref{Namespace: to.Namespace, Name: to.Name},
				ReleasedAt: *from.Status.ReleasedAt,
				AcquiredAt: *acquired,
			}
		}
	}
	return last
}

// lastReleaseBefore is the member other than to that released the lock last, no later than to
// acquired it, having acquired it before.
func lastReleaseBefore(members []*batchv1alpha1.LockedJob, to *batchv1alpha1.LockedJob) *batchv1alpha1.LockedJob {
	var from *batchv1alpha1.LockedJob
	acquired := to.Status.AcquiredAt.Time
	for _, lj := range members {
		released := lj.Status.ReleasedAt
		if lj == to || released == nil || released.After(acquired) ||
			lj.Status.AcquiredAt == nil || lj.Status.AcquiredAt.After(acquired) {
			continue
		}
		if from == nil || released.After(from.Status.ReleasedAt.Time) {
			from = lj
		}
	}
	return from
}
