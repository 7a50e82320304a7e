package plugin

import (
	"cmp"
	"context"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
	// Waiting counts the waiters of the lock: LockedJobs in phase Waiting and guarded Jobs that
	// wait (suspended by the admission gate, with no fence).
	Waiting int `json:"waiting"`
	// Head is the waiter whose status says it is next (status.queuePosition 1), else, when the
	// first waiter in queue order is a guarded Job (which records no place), that Job.
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

// Ref names a LockedJob or a guarded Job; or, for a head of the queue that is neither in view
// (another cluster's), only its name in Redis.
type Ref struct {
	// Kind is LockedJob or Job (a guarded Job); for a Ref known only by Identity, the kind its
	// holder name says, when it says one.
	Kind      locks.Kind `json:"kind,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name,omitempty"`
	// Identity is the waiter's name in Redis (cluster/namespace/name/uid, job:name for a guarded
	// Job) when Name is empty.
	Identity string `json:"identity,omitempty"`
}

// Holder is the holder of a lock: a LockedJob whose condition LockAcquired is True or a guarded
// Job whose guard is Held, or, when none in view holds it (a holder in a namespace the user cannot
// list, or in another cluster sharing the Redis), the holder name the waiters read from Redis
// (status.blockedBy).
type Holder struct {
	// Kind is LockedJob or Job (a guarded Job); for a holder known only by Identity, the kind its
	// holder name says, when it says one.
	Kind      locks.Kind `json:"kind,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name,omitempty"`
	// Identity is the holder's name in Redis (cluster/namespace/name/uid), set only when no
	// LockedJob or guarded Job in view holds the lock.
	Identity string `json:"identity,omitempty"`
	// Slot is the semaphore slot it holds (status.slot, a guarded Job's annotation
	// batch.lockedjob.dev/slot, or the Lock's status.holders[].slot), when
	// the operator acquired the lock as a semaphore: the fencing token orders it only against the
	// earlier holders of this slot.
	Slot *int32 `json:"slot,omitempty"`
	// FencingToken is the holder's fencing token (status.fencingToken, a guarded Job's annotation
	// batch.lockedjob.dev/fencing-token); not a secret.
	FencingToken *int64 `json:"fencingToken,omitempty"`
	// AcquiredAt is when it acquired the lock (status.acquiredAt); a guarded Job records none.
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`
}

// Handoff is a release that passed the lock from one LockedJob to a waiting one (a guarded Job
// records neither when it waited nor when it released).
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

func lockOf(lj *batchv1alpha1.LockedJob) lockID { return lockOfClaimant(locks.ClaimantOf(lj)) }

func lockOfClaimant(c locks.Claimant) lockID {
	if c.Lock.Scope == batchv1alpha1.LockScopeCluster {
		return lockID{scope: batchv1alpha1.LockScopeCluster, name: c.Lock.Name}
	}
	// An object the API server defaulted has a scope; one written before defaulting may not.
	return lockID{scope: batchv1alpha1.LockScopeNamespace, namespace: c.Namespace, name: c.Lock.Name}
}

// listLocks is the one place that knows where the per-lock view comes from: the LockedJobs' status
// and the guarded Jobs' annotations (DeriveLocks), and, for a lock declared as a Lock or
// ClusterLock (issue 11, part 2), that resource's status, which the operator reads from Redis
// (OverlayDeclared). namespace "" lists every namespace. warnings say what could not be seen.
func listLocks(ctx context.Context, c client.Reader, namespace string) (views []LockView, warnings []string, err error) {
	ljs, jobs, warnings, err := listWorkloads(ctx, c, namespace)
	if err != nil {
		return nil, nil, err
	}
	_, invalid := membersOf(ljs, jobs)
	warnings = append(warnings, invalid...)
	views = DeriveLocks(ljs, jobs)
	declared, more, err := listDeclared(ctx, c, namespace, views)
	if err != nil {
		return nil, nil, err
	}
	return OverlayDeclared(views, ljs, jobs, declared), append(warnings, more...), nil
}

// DeriveLocks groups LockedJobs and guarded Jobs by lock and reads, from the LockedJobs' status and
// the Jobs' annotations, who holds each lock, how many wait, who is next and the last handoff. It
// is a pure function of the objects; they say what the operator last recorded, so it can lag Redis
// by one pass. A guarded Job whose label or annotations do not parse is left out.
func DeriveLocks(ljs []batchv1alpha1.LockedJob, jobs []batchv1.Job) []LockView {
	members, _ := membersOf(ljs, jobs)
	groups := map[lockID][]*member{}
	for i := range members {
		id := members[i].lock()
		groups[id] = append(groups[id], &members[i])
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

func deriveLock(id lockID, members []*member) LockView {
	v := LockView{Lock: id.name, Scope: id.scope, Namespace: id.namespace, Source: sourceLockedJobs, Permits: 1}
	waiters := waitersInQueueOrder(members)
	v.Waiting = len(waiters)
	v.setHolders(holdersOf(members, waiters))
	v.Head = headOf(waiters)
	v.LastHandoff = lastHandoff(members)
	return v
}

// headOf is the waiter whose status says it is next (status.queuePosition 1, which the operator
// read from Redis). With none, the first waiter in queue order when it is a guarded Job: a guarded
// Job records no place, and one that stands before every LockedJob waiting is next.
func headOf(waitersInOrder []*member) *Ref {
	for _, w := range waitersInOrder {
		if w.lj != nil && w.lj.Status.QueuePosition != nil && *w.lj.Status.QueuePosition == 1 {
			return ptr.To(w.ref())
		}
	}
	if len(waitersInOrder) > 0 && waitersInOrder[0].lj == nil {
		return ptr.To(waitersInOrder[0].ref())
	}
	return nil
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

// holdersOf are the members that say they hold the lock (a LockedJob's condition LockAcquired
// True, a guarded Job's guard Held), one per slot, lowest slot first (a plain lock has only slot
// 0). Should two say so of one slot for a moment (the old holder's record not yet written), the
// higher fencing token is the later holder: tokens rise within a slot, across both kinds. With
// none, the holder the waiting LockedJobs saw in Redis, the first in line's view first.
func holdersOf(members, waitersInOrder []*member) []Holder {
	bySlot := map[int32]*member{}
	for _, m := range members {
		if !m.holding {
			continue
		}
		slot := ptr.Deref(m.slot, 0)
		if held := bySlot[slot]; held == nil || ptr.Deref(m.fence, -1) > ptr.Deref(held.fence, -1) {
			bySlot[slot] = m
		}
	}
	holders := make([]Holder, 0, len(bySlot))
	for _, slot := range slices.Sorted(maps.Keys(bySlot)) {
		m := bySlot[slot]
		ref := m.ref()
		holders = append(holders, Holder{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, Slot: m.slot,
			FencingToken: m.fence, AcquiredAt: m.acquiredAt})
	}
	if len(holders) > 0 {
		return holders
	}
	for _, w := range waitersInOrder {
		if w.lj != nil && w.lj.Status.BlockedBy != "" {
			return []Holder{holderNamed(w.lj.Status.BlockedBy)}
		}
	}
	return nil
}

// holderNamed is a holder known only by its name in Redis, with the kind that name says.
func holderNamed(holderName string) Holder {
	h := Holder{Identity: holderName}
	if parsed, ok := locks.ParseHolder(holderName); ok {
		h.Kind = parsed.Kind
	}
	return h
}

// waitersInQueueOrder are the members that wait, of both kinds, in the order the operator's queue
// serves them (locks.QueueCompare: the one rule, with the score the operator hands to Redis).
func waitersInQueueOrder(members []*member) []*member {
	var waiters []*member
	for _, m := range members {
		if m.waiting {
			waiters = append(waiters, m)
		}
	}
	slices.SortFunc(waiters, func(a, b *member) int { return locks.QueueCompare(a.claimant, b.claimant) })
	return waiters
}

// lastHandoff is the latest acquisition by a LockedJob that was already waiting when another
// LockedJob of the lock released it: the release passed the lock on. An acquisition after a lease
// expired (a lost lock has no releasedAt) is not a handoff. Times have second precision, so a
// release and the acquisition it allowed may carry the same second.
func lastHandoff(members []*member) *Handoff {
	var ljs []*batchv1alpha1.LockedJob
	for _, m := range members {
		if m.lj != nil {
			ljs = append(ljs, m.lj)
		}
	}
	var last *Handoff
	for _, to := range ljs {
		acquired := to.Status.AcquiredAt
		if acquired == nil || to.Status.WaitingSince == nil {
			continue
		}
		from := lastReleaseBefore(ljs, to)
		if from == nil || to.Status.WaitingSince.After(from.Status.ReleasedAt.Time) {
			continue
		}
		if last == nil || acquired.After(last.AcquiredAt.Time) {
			last = &Handoff{
				From:       memberOfLockedJob(from).ref(),
				To:         memberOfLockedJob(to).ref(),
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
