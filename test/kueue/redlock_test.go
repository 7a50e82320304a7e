package kueue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// permitsUnsupported: the view says the lock's permits are more than the operator's Redis grants.
func permitsUnsupported(l *unstructured.Unstructured) (bool, string) {
	raw, _, _ := unstructured.NestedSlice(l.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok {
			c := metav1.Condition{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
				conds = append(conds, c)
			}
		}
	}
	return meta.IsStatusConditionFalse(conds, batchv1alpha1.ConditionPermitsSupported), fmt.Sprintf("conditions %v", raw)
}

// On a Redlock deployment of the lock library (three redis-servers) a Kueue Job is admitted under
// its lock with a fence held on a majority of the nodes, and its end releases it on all of them. A
// lock that declares two permits, which Redlock cannot grant, keeps its Kueue Job's check Pending
// and says so (PermitsUnsupported) as for LockedJobs and guarded Jobs, until the Lock declares one.
func TestOperatorAdmitsAKueueJobOnRedlock(t *testing.T) {
	ctx := context.Background()
	servers := redisserver.StartN(t, 3)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	startOperatorOn(t, addrs)
	operatorCheck(t, "lock-redlock")
	ns := queues(t, "redlock", "lock-redlock")

	job := lockedQueuedJob(ns, "redlock")
	create(t, job)
	if fence := fenceOf(t, job); fence <= 0 {
		t.Fatalf("Job %s runs with fence %d on Redlock", job.Name, fence)
	}
	if _, ok := job.Annotations[batchv1alpha1.AnnotationSlot]; ok {
		t.Fatalf("Job %s holds a plain lock with a slot: %v", job.Name, job.Annotations)
	}
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]
	held := 0
	for _, s := range servers {
		if n, err := s.Client(t).Exists(ctx, key).Result(); err == nil && n == 1 {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("Redis key %q of the held lock is on %d of 3 nodes; want a majority", key, held)
	}
	completeJob(t, job)
	guardOf(t, job, batchv1alpha1.GuardReleased)
	for i, s := range servers {
		if n, err := s.Client(t).Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Fatalf("Redis key %q on node %d after the release: exists = %d, %v", key, i, n, err)
		}
	}

	l := declareLock(t, ns, "wide", 2, permitsUnsupported)
	wide := lockedQueuedJob(ns, "redlock")
	wide.Labels[batchv1alpha1.LabelGuardLock] = "wide"
	create(t, wide)
	refusal := locks.RedlockRefusal("wide", 2)
	eventually(t, "a PermitsUnsupported Event on Job "+wide.Name, func() (bool, string) {
		notes := eventNotes(t, wide, batchv1alpha1.ReasonPermitsUnsupported)
		return slices.Contains(notes, refusal), fmt.Sprintf("notes %v", notes)
	})
	wl := workloadOf(t, wide)
	eventually(t, "our check on Workload "+wl.GetName()+" says why it stays Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		return checkState(wl, "lock-redlock") == "Pending" && checkMessage(wl, "lock-redlock") == refusal,
			fmt.Sprintf("check %q: %q", checkState(wl, "lock-redlock"), checkMessage(wl, "lock-redlock"))
	})
	consistently(t, "Job "+wide.Name+" stays suspended and unfenced", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wide), wide); err != nil {
			return false, err.Error()
		}
		_, fenced := wide.Annotations[batchv1alpha1.AnnotationFencingToken]
		return wide.Spec.Suspend != nil && *wide.Spec.Suspend && !fenced,
			fmt.Sprintf("spec.suspend %v, annotations %v", wide.Spec.Suspend, wide.Annotations)
	})

	// One permit: the plain lock Redlock grants; the change wakes the waiter.
	eventually(t, "Lock wide declares one permit", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return false, err.Error()
		}
		if err := unstructured.SetNestedField(l.Object, int64(1), "spec", "permits"); err != nil {
			return false, err.Error()
		}
		if err := k8s.Update(ctx, l); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	fenceOf(t, wide)
	if _, ok := wide.Annotations[batchv1alpha1.AnnotationSlot]; ok {
		t.Fatalf("Job %s holds a plain lock with a slot: %v", wide.Name, wide.Annotations)
	}
}
