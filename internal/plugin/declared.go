package plugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Declared locks: a Lock or ClusterLock (issue 11, part 2) whose status the operator reads from
// Redis, laid over the view derived from LockedJobs.

// Declared is the status of a declared lock: a Lock (Namespace scope) or ClusterLock.
type Declared struct {
	Scope     batchv1alpha1.LockScope
	Namespace string
	Name      string
	// Permits is spec.permits: how many may hold the lock at once.
	Permits int32
	Status  batchv1alpha1.LockViewStatus
}

// permits is how many the declaration admits, as the operator reads it (locks.Admits).
func (d *Declared) permits() int {
	return locks.Admits(d.Permits)
}

// listDeclared reads the Locks of namespace ("" for all) and the ClusterLocks of the Cluster-scoped
// locks in views (all of them for every namespace). An operator without the per-lock view (no such
// CRD) or a user who may not read it leaves the view derived from LockedJobs, with a warning for the
// latter.
func listDeclared(ctx context.Context, c client.Reader, namespace string, views []LockView) ([]Declared, []string, error) {
	var declared []Declared
	var warnings []string
	skip := func(kind string, err error) (bool, error) {
		switch {
		case err == nil:
			return false, nil
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			return true, nil
		case apierrors.IsForbidden(err):
			warnings = append(warnings, fmt.Sprintf("cannot read %ss, so locks show what their LockedJobs say: %v", kind, err))
			return true, nil
		}
		return true, fmt.Errorf("list %ss: %w", kind, err)
	}
	var lockList batchv1alpha1.LockList
	if skipped, err := skip(sourceLock, c.List(ctx, &lockList, client.InNamespace(namespace))); err != nil {
		return nil, nil, err
	} else if !skipped {
		for _, l := range lockList.Items {
			declared = append(declared, Declared{Scope: batchv1alpha1.LockScopeNamespace, Namespace: l.Namespace, Name: l.Name, Permits: l.Spec.Permits, Status: l.Status})
		}
	}
	var clusterLocks []batchv1alpha1.ClusterLock
	if namespace == "" {
		var list batchv1alpha1.ClusterLockList
		if skipped, err := skip(sourceClusterLock, c.List(ctx, &list)); err != nil {
			return nil, nil, err
		} else if !skipped {
			clusterLocks = list.Items
		}
	} else {
		for _, v := range views {
			if v.Scope != batchv1alpha1.LockScopeCluster {
				continue
			}
			var cl batchv1alpha1.ClusterLock
			if skipped, err := skip(sourceClusterLock, c.Get(ctx, client.ObjectKey{Name: v.Lock}, &cl)); err != nil {
				return nil, nil, err
			} else if !skipped {
				clusterLocks = append(clusterLocks, cl)
			}
		}
	}
	for _, cl := range clusterLocks {
		declared = append(declared, Declared{Scope: batchv1alpha1.LockScopeCluster, Name: cl.Name, Permits: cl.Spec.Permits, Status: cl.Status})
	}
	return declared, warnings, nil
}

// declaredPermits is spec.permits of the Lock (ClusterLock for scope Cluster) named after the
// claimant's lock: 1 when none declares it or the operator has no such kinds, 0 with a warning
// when the user may not read it.
func declaredPermits(ctx context.Context, c client.Reader, claimant locks.Claimant) (int, []string, error) {
	obj, key := locks.Declaration(claimant)
	kind := sourceLock
	if _, ok := obj.(*batchv1alpha1.ClusterLock); ok {
		kind = sourceClusterLock
	}
	err := c.Get(ctx, key, obj)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return 1, nil, nil
	case apierrors.IsForbidden(err):
		return 0, []string{fmt.Sprintf("cannot read %s %s, so how many permits the lock has is not known: %v", kind, key.Name, err)}, nil
	case err != nil:
		return 0, nil, fmt.Errorf("get %s %s: %w", kind, key.Name, err)
	}
	return locks.Permits(obj), nil, nil
}

// OverlayDeclared takes, for each declared lock, its permits (spec.permits, which is where the
// operator reads them, whatever the age of the status), and, when the operator wrote its status
// after the last change a LockedJob of the lock recorded, the holders with their slots and fencing
// tokens, the number waiting and the
// head from that status: it is read from Redis, so it also sees holders and waiters of other
// clusters that share the Redis. An older one is stale (the operator writes a Lock at most every few
// seconds), and the LockedJobs' view stays. A guarded Job records no time, so its changes cannot
// tell a stale status: until the operator reads the lock again, the Lock's holders may lag one
// (see docs/design.md, "The per-lock view"). The last handoff is always derived from the
// LockedJobs (ljs); they and the guarded Jobs (jobs) name the head when it is one of them. A
// declared lock no LockedJob or guarded Job in view uses gets a row of its own.
func OverlayDeclared(views []LockView, ljs []batchv1alpha1.LockedJob, jobs []batchv1.Job, declared []Declared) []LockView {
	members, _ := membersOf(ljs, jobs)
	index := map[lockID]int{}
	for i := range views {
		index[lockID{scope: views[i].Scope, namespace: views[i].Namespace, name: views[i].Lock}] = i
	}
	changed := lastChanges(ljs)
	for _, d := range declared {
		id := lockID{scope: d.Scope, namespace: d.Namespace, name: d.Name}
		if i, ok := index[id]; ok {
			views[i].Permits = d.permits()
		}
		// Not read from Redis yet, or older than what a LockedJob of the lock recorded since: the
		// operator writes a Lock at most every few seconds, a LockedJob at every change of its own.
		if d.Status.ObservedAt == nil || !d.Status.ObservedAt.After(changed[id]) {
			continue
		}
		i, ok := index[id]
		if !ok {
			views = append(views, LockView{Lock: d.Name, Scope: d.Scope, Namespace: d.Namespace, Permits: d.permits()})
			i = len(views) - 1
			index[id] = i
		}
		overlay(&views[i], &d, members)
	}
	sortViews(views)
	return views
}

// lastChanges is, per lock, the latest time a LockedJob of it recorded: started waiting, acquired,
// released, or changed a condition.
func lastChanges(ljs []batchv1alpha1.LockedJob) map[lockID]time.Time {
	last := map[lockID]time.Time{}
	for i := range ljs {
		lj := &ljs[i]
		id := lockOf(lj)
		later := func(t *metav1.Time) {
			if t != nil && t.After(last[id]) {
				last[id] = t.Time
			}
		}
		later(lj.Status.WaitingSince)
		later(lj.Status.AcquiredAt)
		later(lj.Status.ReleasedAt)
		for j := range lj.Status.Conditions {
			later(&lj.Status.Conditions[j].LastTransitionTime)
		}
	}
	return last
}

func overlay(v *LockView, d *Declared, members []member) {
	v.Source = sourceLock
	if d.Scope == batchv1alpha1.LockScopeCluster {
		v.Source = sourceClusterLock
	}
	status := slices.Clone(d.Status.Holders)
	slices.SortStableFunc(status, func(a, b batchv1alpha1.LockHolder) int { return cmp.Compare(a.Slot, b.Slot) })
	// A lock of one permit is acquired as a plain lock, whose holder has no slot (LockedJob
	// status.slot is nil); the Lock's status still says slot 0 for it.
	withSlots := d.permits() > 1 || slices.ContainsFunc(status, func(h batchv1alpha1.LockHolder) bool { return h.Slot > 0 })
	holders := make([]Holder, 0, len(status))
	for _, h := range status {
		holders = append(holders, declaredHolder(h, d.Namespace, withSlots, v.Holders))
	}
	v.setHolders(holders)
	if d.Status.Waiting != nil {
		v.Waiting = int(*d.Status.Waiting)
		v.Head = nil
		if d.Status.Head != "" {
			v.Head = refOfHolderName(d.Status.Head, members)
		}
	}
}

// declaredHolder is one of a declared lock's status.holders: its LockedJob (lockedJob) or guarded
// Job (job), else its name in Redis. A holder that is a LockedJob in view (among derived) takes its
// acquiredAt from there when the Lock has none. withSlots keeps its slot.
func declaredHolder(h batchv1alpha1.LockHolder, namespace string, withSlots bool, derived []Holder) Holder {
	holder := holderNamed(h.Holder)
	holder.FencingToken, holder.AcquiredAt = ptr.To(h.FencingToken), h.AcquiredAt
	if withSlots {
		holder.Slot = ptr.To(h.Slot)
	}
	kind, workload := locks.KindLockedJob, h.LockedJob
	if h.Job != "" {
		kind, workload = locks.KindJob, h.Job
	}
	ns, name, ok := workloadIn(workload, namespace)
	if !ok {
		return holder
	}
	holder.Kind, holder.Identity, holder.Namespace, holder.Name = kind, "", ns, name
	if holder.AcquiredAt != nil {
		return holder
	}
	for _, d := range derived {
		if d.Kind == kind && d.Namespace == ns && d.Name == name {
			holder.AcquiredAt = d.AcquiredAt
		}
	}
	return holder
}

// workloadIn splits a LockHolder's lockedJob or job ("name" in a Lock's namespace,
// "namespace/name" for a ClusterLock).
func workloadIn(workload, namespace string) (ns, name string, ok bool) {
	if workload == "" {
		return "", "", false
	}
	if ns, name, found := strings.Cut(workload, "/"); found {
		return ns, name, true
	}
	return namespace, workload, true
}

// refOfHolderName names the LockedJob or guarded Job among members whose holder name
// (locks.Identity.Holder, of any cluster) is holderName, or keeps the name as Redis has it.
func refOfHolderName(holderName string, members []member) *Ref {
	h, ok := locks.ParseHolder(holderName)
	if !ok {
		return &Ref{Identity: holderName}
	}
	for _, m := range members {
		c := m.claimant
		if c.Kind == h.Kind && c.Namespace == h.Namespace && c.Name == h.Name && h.UIDPrefix != "" && strings.HasPrefix(string(c.UID), h.UIDPrefix) {
			return ptr.To(m.ref())
		}
	}
	return &Ref{Kind: h.Kind, Identity: holderName}
}
