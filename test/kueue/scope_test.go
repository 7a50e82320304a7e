package kueue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// clusterScoped makes job ask for lock name of scope Cluster.
func clusterScoped(job *batchv1.Job, name string) *batchv1.Job {
	job.Labels[batchv1alpha1.LabelGuardLock] = name
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[batchv1alpha1.AnnotationGuardScope] = string(batchv1alpha1.LockScopeCluster)
	return job
}

// allowClusterScope lets the namespaces use locks of scope Cluster (--cluster-scope-namespaces).
func allowClusterScope(namespaces ...string) func(*controllers.Options) {
	return func(o *controllers.Options) { o.ClusterScopeNamespaces = locks.ScopeGate(namespaces) }
}

// A Kueue Job of a lock of scope Cluster, in a namespace the operator allows it, shares the lock
// with a guarded Job of another namespace: one Redis key, one fencing sequence.
func TestOperatorSharesAClusterScopeLockWithAGuardedJobOfAnotherNamespace(t *testing.T) {
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-cluster-scope-other"}}
	startOperator(t, allowClusterScope("kueue-cluster-scope", other.Name))
	operatorCheck(t, "lock-cluster-scope")
	ns := queues(t, "cluster-scope", "lock-cluster-scope")
	create(t, other)

	holder := clusterScoped(guardedJob(other.Name, "shared"), "shared")
	create(t, holder)
	first := fenceOf(t, holder)

	job := clusterScoped(lockedQueuedJob(ns, "cluster-scope"), "shared")
	create(t, job)
	wl := workloadOf(t, job)
	eventually(t, "Workload "+wl.GetName()+" has quota and our check Pending", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		return checkState(wl, "lock-cluster-scope") == "Pending" && condition(wl, "QuotaReserved") != nil,
			fmt.Sprintf("check %q", checkState(wl, "lock-cluster-scope"))
	})
	consistently(t, "the Kueue Job waits while the guarded Job of "+other.Name+" holds the lock", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		return waitsUnfenced(job)
	})

	completeJob(t, holder)
	second := fenceOf(t, job)
	if second <= first {
		t.Fatalf("Kueue Job %s runs with fence %d, not above the guarded Job's %d", job.Name, second, first)
	}
	if got, want := job.Annotations[batchv1alpha1.AnnotationGuardLockKey], holder.Annotations[batchv1alpha1.AnnotationGuardLockKey]; got != want || got == "" {
		t.Fatalf("Kueue Job %s holds Redis key %q; the guarded Job of %s held %q", job.Name, got, other.Name, want)
	}
}

// A Kueue Job of a lock of scope Cluster in a namespace the operator does not allow it is never
// answered: no Redis command names its lock or its Job, it names no holder, its check stays Pending
// and says why, and an Event says it too.
func TestOperatorRefusesClusterScopeToAKueueJobOfANamespaceNotAllowed(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t, allowClusterScope("kueue-somewhere-else"))
	operatorCheck(t, "lock-scope-refused")
	ns := queues(t, "scope-refused", "lock-scope-refused")
	seen := redisserver.Monitor(t, rdb)

	job := clusterScoped(lockedQueuedJob(ns, "scope-refused"), "refused-global")
	create(t, job)
	guardOf(t, job, batchv1alpha1.GuardScopeNotAllowed)
	wl := workloadOf(t, job)
	eventually(t, "our check on Workload "+wl.GetName()+" says why it stays Pending", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return false, err.Error()
		}
		msg := checkMessage(wl, "lock-scope-refused")
		return checkState(wl, "lock-scope-refused") == "Pending" &&
				strings.Contains(msg, "Lock refused-global has scope Cluster, which namespace "+ns+" may not use"),
			fmt.Sprintf("check %q: %q", checkState(wl, "lock-scope-refused"), msg)
	})
	eventually(t, "a ScopeNotAllowed Event on Job "+job.Name, func() (bool, string) {
		notes := eventNotes(t, job, batchv1alpha1.ReasonScopeNotAllowed)
		return len(notes) > 0 && strings.Contains(notes[0], "scope Cluster"), fmt.Sprintf("notes %v", notes)
	})
	consistently(t, "Job "+job.Name+" stays suspended and names no holder", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		_, holder := job.Annotations[batchv1alpha1.AnnotationHolder]
		_, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]
		return job.Spec.Suspend != nil && *job.Spec.Suspend && !holder && !fenced,
			fmt.Sprintf("spec.suspend %v, annotations %v", job.Spec.Suspend, job.Annotations)
	})
	for _, line := range seen() {
		if strings.Contains(line, "refused-global") || strings.Contains(line, job.Name) {
			t.Fatalf("Redis saw a command about the refused lock or its Job: %s", line)
		}
	}
}

// checkMessage is the message of the admission check name in Workload wl's status, or "".
func checkMessage(wl *unstructured.Unstructured, name string) string {
	checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, c := range checks {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

// eventNotes are the notes of the Events of reason regarding job.
func eventNotes(t *testing.T, job *batchv1.Job, reason string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(job.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == job.Name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}
