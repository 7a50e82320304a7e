package kueue_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// declareLock creates the Lock name in ns with permits, and waits until the per-lock view settled
// it: then the operator's reads of the Lock (its cache) know the number, and a Job created after
// this asks with it. settled reports what "settled" means for the test's Redis.
func declareLock(t *testing.T, ns, name string, permits int64, settled func(l *unstructured.Unstructured) (bool, string)) *unstructured.Unstructured {
	t.Helper()
	l := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"permits": permits}}}
	l.SetGroupVersionKind(batchv1alpha1.GroupVersion.WithKind("Lock"))
	l.SetNamespace(ns)
	l.SetName(name)
	create(t, l)
	eventually(t, "Lock "+name+" is settled", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(l), l); err != nil {
			return false, err.Error()
		}
		return settled(l)
	})
	return l
}

// permitsInStatus: the view reports n permits admitted.
func permitsInStatus(n int64) func(*unstructured.Unstructured) (bool, string) {
	return func(l *unstructured.Unstructured) (bool, string) {
		got, _, _ := unstructured.NestedInt64(l.Object, "status", "permits")
		return got == n, fmt.Sprintf("status.permits = %d", got)
	}
}

// slotOf checks that a running Kueue Job carries the same slot in its record and its pod template
// (Kueue's copy of our podSetUpdates), and returns it.
func slotOf(t *testing.T, job *batchv1.Job) int {
	t.Helper()
	recorded, ok := job.Annotations[batchv1alpha1.AnnotationSlot]
	if !ok {
		t.Fatalf("Job %s holds a semaphore without a slot: annotations %v", job.Name, job.Annotations)
	}
	if got := job.Spec.Template.Annotations[batchv1alpha1.AnnotationSlot]; got != recorded {
		t.Fatalf("Job %s records slot %q and runs with pod template slot %q", job.Name, recorded, got)
	}
	slot, err := strconv.Atoi(recorded)
	if err != nil {
		t.Fatalf("Job %s: slot %q: %v", job.Name, recorded, err)
	}
	return slot
}

// Two Kueue Jobs of a Lock of two permits hold slots 0 and 1 at once, each with its own fence; a
// third waits on its Pending check until one ends, and is admitted into the freed slot under a
// fence above that slot's last.
func TestOperatorAdmitsKueueJobsOfASemaphoreInDistinctSlots(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	operatorCheck(t, "lock-pool")
	ns := queues(t, "pool", "lock-pool")
	l := declareLock(t, ns, "db", 2, permitsInStatus(2))

	a, b := lockedQueuedJob(ns, "pool"), lockedQueuedJob(ns, "pool")
	create(t, a)
	create(t, b)
	fa, fb := fenceOf(t, a), fenceOf(t, b)
	if fa == fb {
		t.Fatalf("Jobs %s and %s hold the semaphore with one fence %d", a.Name, b.Name, fa)
	}
	sa, sb := slotOf(t, a), slotOf(t, b)
	if sa+sb != 1 || sa*sb != 0 {
		t.Fatalf("Jobs %s and %s hold slots %d and %d; want 0 and 1", a.Name, b.Name, sa, sb)
	}
	eventually(t, "Lock db shows two of two permits in use", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return false, err.Error()
		}
		inUse, _, _ := unstructured.NestedInt64(l.Object, "status", "inUse")
		return inUse == 2, fmt.Sprintf("status.inUse = %d", inUse)
	})

	c := lockedQueuedJob(ns, "pool")
	create(t, c)
	wl := workloadOf(t, c)
	eventually(t, "Workload "+wl.GetName()+" has quota and our check Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		q := condition(wl, "QuotaReserved")
		return q != nil && q.Status == metav1.ConditionTrue && checkState(wl, "lock-pool") == "Pending",
			fmt.Sprintf("QuotaReserved = %+v, check %q", q, checkState(wl, "lock-pool"))
	})
	consistently(t, "the third Job waits while both permits are held", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err.Error()
		}
		_, fenced := c.Annotations[batchv1alpha1.AnnotationFencingToken]
		return c.Spec.Suspend != nil && *c.Spec.Suspend && !fenced,
			fmt.Sprintf("spec.suspend %v, annotations %v", c.Spec.Suspend, c.Annotations)
	})

	completeJob(t, a)
	fc := fenceOf(t, c)
	if sc := slotOf(t, c); sc != sa {
		t.Fatalf("Job %s took slot %d; want the freed slot %d", c.Name, sc, sa)
	}
	if fc <= fa {
		t.Fatalf("Job %s runs in slot %d with fence %d, not above the slot's last %d", c.Name, sa, fc, fa)
	}
	if fc == fb {
		t.Fatalf("Job %s runs with the other holder's fence %d", c.Name, fb)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	if got := b.Annotations[batchv1alpha1.AnnotationFencingToken]; got != strconv.FormatInt(fb, 10) {
		t.Fatalf("the other holder %s records fence %q after the handoff; want %d", b.Name, got, fb)
	}
}
