package kueue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The release of a Kueue Job's lock at its pod's outcome (docs/design.md, Scale, item 14): no Job
// controller runs here, so the test writes the pod the Job controller would create from the pod
// template Kueue wrote, and its end as the kubelet would.

// podOf creates a pod that job controls, from its pod template (labels included), as the Job
// controller would, with the finalizers given.
func podOf(t *testing.T, job *batchv1.Job, finalizers ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    job.Name + "-",
			Namespace:       job.Namespace,
			Labels:          job.Spec.Template.Labels,
			Annotations:     job.Spec.Template.Annotations,
			Finalizers:      finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: job.Spec.Template.Spec,
	}
	create(t, pod)
	return pod
}

// succeed writes the pod's end as the kubelet would: phase Succeeded.
func succeed(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	eventually(t, "pod "+pod.Name+" is Succeeded", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		pod.Status.Phase = corev1.PodSucceeded
		if err := k8s.Status().Update(context.Background(), pod); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// A Kueue Job whose pod succeeded hands its lock on before the Job controller's Complete: the
// pod template Kueue wrote from our check carries the label of the reconciler's pod cache.
func TestOperatorReleasesAKueueJobAtItsPodsOutcome(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t)
	operatorCheck(t, "lock-outcome")
	ns := queues(t, "outcome", "lock-outcome")
	job := lockedQueuedJob(ns, "outcome")
	create(t, job)
	first := fenceOf(t, job)
	if got := job.Spec.Template.Labels[batchv1alpha1.LabelGuardedJobPod]; got != batchv1alpha1.GuardedJobPodKueue {
		t.Fatalf("Job %s pod template label %s = %q; want %q (from our check's podSetUpdates)", job.Name,
			batchv1alpha1.LabelGuardedJobPod, got, batchv1alpha1.GuardedJobPodKueue)
	}
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]

	pod := podOf(t, job)
	succeed(t, pod)
	guardOf(t, job, batchv1alpha1.GuardReleased)
	if len(job.Status.Conditions) != 0 {
		t.Fatalf("Job %s has conditions %v; no Job controller runs here, so the release must come from its pod", job.Name, job.Status.Conditions)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("Redis key %q after the release: exists = %d, %v", key, n, err)
	}
	eventually(t, "Job "+job.Name+" has the Event Released", func() (bool, string) {
		reasons := eventReasons(t, job)
		return slices.Contains(reasons, batchv1alpha1.ReasonReleased), fmt.Sprintf("reasons %v", reasons)
	})
	next := guardedJob(ns, "db")
	create(t, next)
	if second := fenceOf(t, next); second <= first {
		t.Fatalf("the next holder runs with fence %d, not above the Kueue Job's %d", second, first)
	}
}

// A succeeded pod that had been deleted may have a replacement on its way (the Job API's default
// podReplacementPolicy, TerminatingOrFailed, replaces a terminating pod), so the lock waits for the
// Job's condition.
func TestOperatorWaitsForTheConditionOfAKueueJobWhosePodWasDeleted(t *testing.T) {
	ctx := context.Background()
	rdb := startOperator(t)
	operatorCheck(t, "lock-outcome-deleted")
	ns := queues(t, "outcome-deleted", "lock-outcome-deleted")
	job := lockedQueuedJob(ns, "outcome-deleted")
	create(t, job)
	fenceOf(t, job)
	key := job.Annotations[batchv1alpha1.AnnotationGuardLockKey]

	const hold = "lockedjob.dev/test-hold"
	pod := podOf(t, job, hold)
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	succeed(t, pod)
	if pod.DeletionTimestamp.IsZero() {
		t.Fatalf("pod %s has no deletionTimestamp after its deletion", pod.Name)
	}
	consistently(t, "Job "+job.Name+" keeps its lock", func() (bool, string) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		n, err := rdb.Exists(ctx, key).Result()
		return job.Annotations[batchv1alpha1.AnnotationGuard] == string(batchv1alpha1.GuardHeld) && err == nil && n == 1,
			fmt.Sprintf("guard %q, key exists = %d, %v", job.Annotations[batchv1alpha1.AnnotationGuard], n, err)
	})

	completeJob(t, job)
	guardOf(t, job, batchv1alpha1.GuardReleased)
	if err := k8s.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
}
