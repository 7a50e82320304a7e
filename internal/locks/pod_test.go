package locks

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestClaimantOfPod: a guarded Pod's label and annotations make its claim by the guarded Job's
// rules, of kind Pod, and what does not parse is refused by name.
func TestClaimantOfPod(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etl", UID: "uid-p",
		CreationTimestamp: metav1.NewTime(created),
		Labels:            map[string]string{batchv1alpha1.LabelGuardLock: "db"},
		Annotations:       map[string]string{batchv1alpha1.AnnotationGuardPriority: "7", batchv1alpha1.AnnotationGuardOnLockLost: "Delete"}}}
	c, err := ClaimantOfPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != KindPod || c.Namespace != "ns" || c.Name != "etl" || c.UID != "uid-p" || !c.Created.Equal(created) ||
		c.Lock.Name != "db" || c.Lock.Scope != batchv1alpha1.LockScopeNamespace || c.Lock.Priority != 7 || c.Lock.OnLockLost != batchv1alpha1.LockLostDelete {
		t.Fatalf("ClaimantOfPod = %+v", c)
	}
	pod.Annotations[batchv1alpha1.AnnotationGuardTTL] = "forever"
	if _, err := ClaimantOfPod(pod); err == nil || !strings.Contains(err.Error(), batchv1alpha1.AnnotationGuardTTL) {
		t.Fatalf("ClaimantOfPod with a bad ttl = %v, want an error naming %s", err, batchv1alpha1.AnnotationGuardTTL)
	}
}

// TestAPodAndAJobShareTheKey: a guarded Pod and a guarded Job of one lock name ask for one key,
// under holder names that never collide, and ParseHolder tells the Pod's kind.
func TestAPodAndAJobShareTheKey(t *testing.T) {
	id := Identity{ClusterID: "c", TokenKey: []byte("0123456789abcdef")}
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}}
	p := &corev1.Pod{ObjectMeta: meta}
	p.UID = "uid-p"
	j := &batchv1.Job{ObjectMeta: *meta.DeepCopy()}
	j.UID = "uid-j"
	pod, err := ClaimantOfPod(p)
	if err != nil {
		t.Fatal(err)
	}
	job, err := ClaimantOfJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if id.LockKey(pod) != id.LockKey(job) {
		t.Fatalf("keys %q and %q differ", id.LockKey(pod), id.LockKey(job))
	}
	if id.Holder(pod) != "c/ns/pod:a/uid-p" || id.Holder(pod) == id.Holder(job) {
		t.Fatalf("holder names %q and %q", id.Holder(pod), id.Holder(job))
	}
	if h, ok := ParseHolder(id.Holder(pod)); !ok || h.Kind != KindPod || h.Name != "a" {
		t.Fatalf("ParseHolder(%q) = %+v, %v", id.Holder(pod), h, ok)
	}
}

// TestIsGuardedPod: a Pod is guarded by the lock label unless a batch/v1 Job controls it; another
// controller (an Argo Workflow) or a Job that only owns it leaves it guarded.
func TestIsGuardedPod(t *testing.T) {
	owner := func(apiVersion, kind string, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "u", Controller: ptr.To(controller)}}
	}
	lock := map[string]string{batchv1alpha1.LabelGuardLock: "db"}
	for name, tc := range map[string]struct {
		labels map[string]string
		owners []metav1.OwnerReference
		want   bool
	}{
		"labelled and bare":                       {labels: lock, want: true},
		"labelled, a Job owns it without control": {labels: lock, owners: owner("batch/v1", "Job", false), want: true},
		"labelled, a Workflow controls it":        {labels: lock, owners: owner("argoproj.io/v1alpha1", "Workflow", true), want: true},
		"labelled, a TaskRun controls it":         {labels: lock, owners: owner("tekton.dev/v1", "TaskRun", true), want: true},
		"labelled, a Job of another group":        {labels: lock, owners: owner("example.com/v1", "Job", true), want: true},
		"labelled, a batch/v1 Job controls it":    {labels: lock, owners: owner("batch/v1", "Job", true)},
		"labelled, a Job controls it, a Workflow owns it": {labels: lock,
			owners: append(owner("argoproj.io/v1alpha1", "Workflow", false), owner("batch/v1", "Job", true)...)},
		"not labelled":                         {},
		"not labelled, a Workflow controls it": {owners: owner("argoproj.io/v1alpha1", "Workflow", true)},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels, OwnerReferences: tc.owners}}
			if got := IsGuardedPod(pod); got != tc.want {
				t.Errorf("IsGuardedPod = %v, want %v", got, tc.want)
			}
		})
	}
}
