package lockedjob

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/unit"
)

func TestBuildJobCarriesTheLock(t *testing.T) {
	lj := lockedJob("migrate", "uid")
	lj.Spec.JobTemplate = batchv1alpha1.JobTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "db"}, Annotations: map[string]string{"note": "x"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "KEEP", Value: "1"}}}},
			Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
		}}},
	}
	job, err := buildJob(lj, "migrate-15", 41, "c/n/migrate/uid", unit.Scheme(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(job.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.Containers...) {
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		if env[batchv1alpha1.EnvFencingToken] != "41" || env[batchv1alpha1.EnvLock] != "db" || env[batchv1alpha1.EnvHolder] != "c/n/migrate/uid" {
			t.Fatalf("container %s env %v lacks the lock", c.Name, env)
		}
	}
	if job.Spec.Template.Spec.InitContainers[0].Env[0].Name != "KEEP" {
		t.Fatal("template env was not kept")
	}
	if job.Labels["team"] != "db" || job.Labels[batchv1alpha1.LabelLockedJob] != "migrate" || job.Annotations["note"] != "x" ||
		job.Annotations[batchv1alpha1.AnnotationFencingToken] != "41" {
		t.Fatalf("labels %v annotations %v", job.Labels, job.Annotations)
	}
	// The pods carry the owner's names too: the pod cache selects them and a pod's outcome wakes the LockedJob.
	if pod := job.Spec.Template; pod.Labels[batchv1alpha1.LabelLockedJob] != "migrate" || pod.Annotations[batchv1alpha1.AnnotationLockedJob] != "migrate" ||
		pod.Annotations[batchv1alpha1.AnnotationFencingToken] != "41" {
		t.Fatalf("pod template labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if lj.Spec.JobTemplate.Spec.Template.Labels != nil || lj.Spec.JobTemplate.Spec.Template.Annotations != nil ||
		lj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env != nil || lj.Spec.JobTemplate.Labels[batchv1alpha1.LabelLockedJob] != "" {
		t.Fatal("buildJob changed the LockedJob's template")
	}
	if len(job.OwnerReferences) != 1 || job.OwnerReferences[0].UID != "uid" || !*job.OwnerReferences[0].Controller {
		t.Fatalf("owner references %v", job.OwnerReferences)
	}
}

// TestBuildJobLongNameLabel: the owner label fits a label value and the annotation keeps the name.
func TestBuildJobLongNameLabel(t *testing.T) {
	lj := lockedJob(strings.Repeat("a", 253), "uid")
	job, err := buildJob(lj, "j", 41, "h", unit.Scheme(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Labels[batchv1alpha1.LabelLockedJob]; got != batchv1alpha1.NameLabelValue(lj.Name) || len(validation.IsValidLabelValue(got)) > 0 {
		t.Fatalf("label %s = %q, want the valid %q", batchv1alpha1.LabelLockedJob, got, batchv1alpha1.NameLabelValue(lj.Name))
	}
	if got := job.Annotations[batchv1alpha1.AnnotationLockedJob]; got != lj.Name {
		t.Fatalf("annotation %s = %q, want the full name", batchv1alpha1.AnnotationLockedJob, got)
	}
}

// TestBuildJobRunsAtOnceOnePodAtATime: a suspended Job would hold the lock while nothing runs
// (item 18); a replacement pod must not start beside a terminating one with the same token
// (item 20); a manual selector or another controller would hide the pods the operator waits for
// (item 16). The CRD refuses these in new objects; buildJob also covers objects stored before.
func TestBuildJobRunsAtOnceOnePodAtATime(t *testing.T) {
	cases := map[string]struct {
		spec        batchv1.JobSpec
		replacement batchv1.PodReplacementPolicy
	}{
		"defaults": {batchv1.JobSpec{}, batchv1.Failed},
		"suspended, manual selector, other manager": {batchv1.JobSpec{
			Suspend:        ptr.To(true),
			ManualSelector: ptr.To(true),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			ManagedBy:      ptr.To("example.com/elsewhere"),
		}, batchv1.Failed},
		"replacement policy chosen by the template": {batchv1.JobSpec{
			PodReplacementPolicy: ptr.To(batchv1.TerminatingOrFailed),
		}, batchv1.TerminatingOrFailed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lj := lockedJob("run", "uid")
			lj.Spec.JobTemplate.Spec = tc.spec
			job, err := buildJob(lj, "run-15", 41, "h", unit.Scheme(t))
			if err != nil {
				t.Fatal(err)
			}
			s := job.Spec
			if s.Suspend == nil || *s.Suspend {
				t.Errorf("suspend = %v, want false", s.Suspend)
			}
			if s.PodReplacementPolicy == nil || *s.PodReplacementPolicy != tc.replacement {
				t.Errorf("podReplacementPolicy = %v, want %s", s.PodReplacementPolicy, tc.replacement)
			}
			if s.ManualSelector != nil || s.Selector != nil || s.ManagedBy != nil {
				t.Errorf("manualSelector %v, selector %v, managedBy %v: want all unset", s.ManualSelector, s.Selector, s.ManagedBy)
			}
		})
	}
}
