package kueue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// A Job with the lock label in a ClusterQueue that lists none of our AdmissionChecks is admitted by
// Kueue without the lock. The operator marks it Unguarded and says why in a Warning Event, never
// treats it as a holder (no fence, no holder, no finalizer), and another claimant of the lock
// acquires it while the unguarded Job runs.
func TestOperatorMarksAKueueJobAdmittedWithoutOurCheckUnguarded(t *testing.T) {
	ctx := context.Background()
	startOperator(t)
	ns := queues(t, "unchecked")
	job := lockedQueuedJob(ns, "unchecked")
	create(t, job)
	waitUnsuspended(t, job)
	guardOf(t, job, batchv1alpha1.GuardUnguarded)

	eventually(t, "an Unguarded Event on Job "+job.Name+" naming its ClusterQueue", func() (bool, string) {
		notes := eventNotes(t, job, batchv1alpha1.ReasonUnguarded)
		return slices.ContainsFunc(notes, func(n string) bool {
			return strings.Contains(n, "carries lock db but runs without it") &&
				strings.Contains(n, "ClusterQueue unchecked, which lists no AdmissionCheck of controller "+lockController)
		}), fmt.Sprintf("notes %v", notes)
	})
	for _, a := range []string{batchv1alpha1.AnnotationFencingToken, batchv1alpha1.AnnotationHolder, batchv1alpha1.AnnotationGuardLockKey} {
		if v, ok := job.Annotations[a]; ok {
			t.Fatalf("Unguarded Job %s records %s = %q", job.Name, a, v)
		}
	}
	if slices.Contains(job.Finalizers, batchv1alpha1.FinalizerReleaseLock) {
		t.Fatalf("Unguarded Job %s carries our finalizer", job.Name)
	}
	if _, ok := job.Spec.Template.Annotations[fencingTokenAnnotation]; ok {
		t.Fatalf("Unguarded Job %s runs with a fence: %v", job.Name, job.Spec.Template.Annotations)
	}

	// Not a holder: a guarded Job of the same lock acquires it while the unguarded one still runs.
	next := guardedJob(ns, "db")
	create(t, next)
	fenceOf(t, next)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	if job.Annotations[batchv1alpha1.AnnotationGuard] != string(batchv1alpha1.GuardUnguarded) {
		t.Fatalf("Job %s records guard %q after another acquired its lock", job.Name, job.Annotations[batchv1alpha1.AnnotationGuard])
	}
}
