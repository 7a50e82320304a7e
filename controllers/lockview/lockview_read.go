package lockview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// The view as a reader: what Redis holds of a declared lock, written to its status.

// refresh reads the lock from Redis into *status and writes it when it changed and its write
// budget allows (writeWait). namespace is the Lock's, "" for a ClusterLock; admitted is how
// many Redis admits at once now (see settlePermits).
func (r *LockViewReconciler) refresh(ctx context.Context, obj client.Object, status *batchv1alpha1.LockViewStatus, key, namespace string, admitted int) (reconcile.Result, error) {
	id := client.ObjectKeyFromObject(obj)
	// A changed number is written at once: status.permits is what wakes the lock's waiters once
	// Redis has the number (see wakeOnPermits), so it must not wait for the write interval.
	if wait := r.writeWait(id); wait > 0 && status.Permits == int32(admitted) {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	base := obj.DeepCopyObject().(client.Object)
	before := status.DeepCopy()
	status.ObservedGeneration = obj.GetGeneration()
	readErr := r.read(ctx, status, key, namespace, locks.Permits(obj), admitted)
	status.ObservedAt = before.ObservedAt
	if equality.Semantic.DeepEqual(before, status) {
		return reconcile.Result{RequeueAfter: r.Resync}, readErr
	}
	status.ObservedAt = &metav1.Time{Time: r.Clock.Now().Truncate(time.Second)}
	if err := r.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("record the view of lock %s: %w", key, err)
	}
	r.wrote(id)
	return reconcile.Result{RequeueAfter: r.Resync}, readErr
}

// read fills status from Redis: the holder with its fence, and the queue. On a failed read only the
// RedisAvailable condition changes, so the last view stays visible.
func (r *LockViewReconciler) read(ctx context.Context, status *batchv1alpha1.LockViewStatus, key, namespace string, permits, admitted int) error {
	rctx, cancel := context.WithTimeout(ctx, r.RedisTimeout)
	defer cancel()
	slots, err := r.Locks.Slots(rctx, key)
	if err != nil {
		r.setRedis(status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, fmt.Sprintf("Redis unavailable: %v", err))
		return fmt.Errorf("inspect %s: %w", key, err)
	}
	status.LockKey = r.Locks.RedisKey(key)
	status.Permits = int32(admitted)
	status.LastFencingToken = 0
	before := status.Holders
	status.Holders = nil
	for slot, st := range slots {
		status.LastFencingToken = max(status.LastFencingToken, st.Fence)
		if st.Held {
			status.Holders = append(status.Holders, r.holder(ctx, st.Metadata, st.Fence, int32(slot), namespace))
		}
	}
	if h := handoff(before, status.Holders, r.Clock.Now()); h != nil {
		status.LastHandoff = h
	}
	status.InUse = int32(slots.InUse())
	r.setPermitsSupported(status, permits)
	status.Waiting, status.Head = nil, ""
	if r.Locks.HandsOff() {
		q, err := r.Locks.QueueState(rctx, key)
		if err != nil {
			r.setRedis(status, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, fmt.Sprintf("Redis unavailable: %v", err))
			return fmt.Errorf("queue of %s: %w", key, err)
		}
		waiting := int32(q.Waiting)
		status.Waiting, status.Head = &waiting, q.Head
	}
	r.setRedis(status, metav1.ConditionTrue, batchv1alpha1.ReasonRedisOK, "Redis answered")
	return nil
}

// setPermitsSupported says whether Redis can grant the permits the lock declares.
func (r *LockViewReconciler) setPermitsSupported(status *batchv1alpha1.LockViewStatus, permits int) {
	s, reason, msg := metav1.ConditionTrue, batchv1alpha1.ReasonPermitsSupported, fmt.Sprintf("Redis admits %d holders of this lock at once", permits)
	behind := r.olderClients()
	switch {
	case r.Locks.Admits(permits) < permits:
		s, reason = metav1.ConditionFalse, batchv1alpha1.ReasonPermitsUnsupported
		msg = fmt.Sprintf("spec.permits is %d, and the operator's Redis is Redlock, which admits one holder per lock: the lock's LockedJobs wait until spec.permits is 1", permits)
	case permits > 1 && len(behind) > 0:
		s, reason = metav1.ConditionFalse, batchv1alpha1.ReasonOlderOperators
		msg = fmt.Sprintf("spec.permits is %d, but %s shares this Redis and speaks lock protocol %d, which would not honour them (%d needed): the lock admits one holder until it is upgraded or gone",
			permits, behind[0].Member, behind[0].Protocol, lockbook.SemaphoreProtocol)
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batchv1alpha1.ConditionPermitsSupported, Status: s, Reason: reason, Message: sreconcile.CutMessage(msg),
		ObservedGeneration: status.ObservedGeneration, LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}

// handoff is the lock passing from a holder of before that is gone to the newest holder of now that
// was not in before (for a semaphore, from the one that left the newcomer's slot, if it did); nil
// when no holder left or none came. A holder of another cluster has no
// acquiredAt here: it came when it was read (now).
func handoff(before, now []batchv1alpha1.LockHolder, at time.Time) *batchv1alpha1.LockHandoff {
	held := func(hs []batchv1alpha1.LockHolder, h batchv1alpha1.LockHolder) bool {
		return slices.ContainsFunc(hs, func(o batchv1alpha1.LockHolder) bool { return o.Holder == h.Holder })
	}
	var from, to *batchv1alpha1.LockHolder
	for i := range now {
		if !held(before, now[i]) && (to == nil || acquiredAt(now[i], at).After(acquiredAt(*to, at))) {
			to = &now[i]
		}
	}
	if to == nil {
		return nil
	}
	// Of a semaphore's holders that left, the one of the newcomer's slot passed it on.
	for i := range before {
		if !held(now, before[i]) && (from == nil || before[i].Slot == to.Slot) {
			from = &before[i]
		}
	}
	if from == nil {
		return nil
	}
	return &batchv1alpha1.LockHandoff{From: handoffName(*from), To: handoffName(*to),
		At: metav1.Time{Time: acquiredAt(*to, at).Truncate(time.Second)}}
}

func acquiredAt(h batchv1alpha1.LockHolder, otherwise time.Time) time.Time {
	if h.AcquiredAt == nil {
		return otherwise
	}
	return h.AcquiredAt.Time
}

// holder describes the holder named holderName. A holder of this cluster is named by its
// LockedJob (and, if the cache has it holding, when it acquired) or its guarded Job (whose record
// has no acquisition time, so none is shown); another cluster's only by name.
func (r *LockViewReconciler) holder(ctx context.Context, holderName string, fence int64, slot int32, namespace string) batchv1alpha1.LockHolder {
	h := batchv1alpha1.LockHolder{Holder: holderName, FencingToken: fence, Slot: slot}
	parsed, ok := locks.ParseHolder(holderName)
	if !ok || parsed.ClusterID != r.Identity.ClusterID || (parsed.Kind != locks.KindLockedJob && parsed.Kind != locks.KindJob) {
		return h
	}
	var name string
	switch namespace {
	case "":
		name = parsed.Namespace + "/" + parsed.Name
	case parsed.Namespace:
		name = parsed.Name
	default:
		return h // a Namespace-scope key names its namespace: another one cannot hold it
	}
	if parsed.Kind == locks.KindJob {
		h.Job = name
		return h
	}
	h.LockedJob = name
	lj := &batchv1alpha1.LockedJob{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: parsed.Namespace, Name: parsed.Name}, lj); err == nil && lj.Status.Holder == holderName {
		h.AcquiredAt = lj.Status.AcquiredAt
	}
	return h
}

// handoffName names a holder in a LockHandoff: its LockedJob, its guarded Job with the kind in
// front (kubectl's "job/name", after the namespace for a ClusterLock), else its holder name.
func handoffName(h batchv1alpha1.LockHolder) string {
	if h.Job == "" {
		return cmp.Or(h.LockedJob, h.Holder)
	}
	if ns, name, found := strings.Cut(h.Job, "/"); found {
		return ns + "/job/" + name
	}
	return "job/" + h.Job
}

func (r *LockViewReconciler) setRedis(status *batchv1alpha1.LockViewStatus, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batchv1alpha1.ConditionRedisAvailable, Status: s, Reason: reason, Message: sreconcile.CutMessage(msg),
		ObservedGeneration: status.ObservedGeneration, LastTransitionTime: metav1.NewTime(r.Clock.Now().Truncate(time.Second)),
	})
}
