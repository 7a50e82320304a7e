package lockedjob

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
)

// jobCacheOptions returns what CacheOptions says of Jobs.
func jobCacheOptions(t *testing.T) cache.ByObject {
	t.Helper()
	for obj, by := range CacheOptions().ByObject {
		if _, ok := obj.(*batchv1.Job); ok {
			return by
		}
	}
	t.Fatal("CacheOptions says nothing of Jobs: the operator would cache every Job of the cluster")
	return cache.ByObject{}
}

func TestCacheFollowsTheJobsTheOperatorCreates(t *testing.T) {
	by := jobCacheOptions(t)
	if by.Label == nil {
		t.Fatal("no label selector on Jobs")
	}
	// A name too long for a label value, so the label carries a hash of it.
	own, err := buildJob(lockedJob(strings.Repeat("a", 253), "uid"), "j", 7, "h", unit.Scheme(t))
	if err != nil {
		t.Fatal(err)
	}
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}}
	for _, tc := range []struct {
		job  *batchv1.Job
		want bool
	}{{own, true}, {other, false}} {
		if got := by.Label.Matches(labels.Set(tc.job.Labels)); got != tc.want {
			t.Errorf("selector %q matches %v = %v, want %v", by.Label, tc.job.Labels, got, tc.want)
		}
		// A running LockedJob counts on events exactly for the Jobs the cache follows.
		if got := watched(tc.job); got != tc.want {
			t.Errorf("watched(%v) = %v, want %v", tc.job.Labels, got, tc.want)
		}
	}
}

func TestCachedJobsKeepWhatTheOperatorReads(t *testing.T) {
	by := jobCacheOptions(t)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: "j", Namespace: "n", UID: "u",
			Labels:          map[string]string{batchv1alpha1.LabelLockedJob: "lj"},
			Annotations:     map[string]string{batchv1alpha1.AnnotationFencingToken: "7"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "LockedJob", Name: "lj", UID: "o", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		},
		Spec: batchv1.JobSpec{
			Suspend:  ptr.To(false),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		},
		Status: batchv1.JobStatus{Active: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	out, err := by.Transform(job)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*batchv1.Job)
	if len(got.Spec.Template.Spec.Containers) != 0 || got.ManagedFields != nil {
		t.Errorf("the pod template or managedFields are cached: %+v", got)
	}
	if got.UID != "u" || got.Annotations[batchv1alpha1.AnnotationFencingToken] != "7" || len(got.OwnerReferences) != 1 ||
		got.Spec.Suspend == nil || !reconcile.JobFinished(got) || got.Status.Active != 1 {
		t.Errorf("the transform dropped what the operator reads: %+v", got)
	}
}
