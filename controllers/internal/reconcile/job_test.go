package reconcile

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestOutcomeSettled: a Job's lock may go before its condition only for the shape whose pods say
// for certain that nothing of it runs again (one pod at a time to one completion, replaced only
// once terminal, the built-in controller), and only once a pod it controls succeeded and none of
// its pods is still to end.
func TestOutcomeSettled(t *testing.T) {
	job := func(edit ...func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: types.UID("job-uid")},
			// As the API defaults a Job that gives neither completions nor parallelism.
			Spec: batchv1.JobSpec{Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1),
				PodReplacementPolicy: ptr.To(batchv1.Failed), Suspend: ptr.To(false)},
		}
		for _, e := range edit {
			e(j)
		}
		return j
	}
	pod := func(name string, phase corev1.PodPhase, owner types.UID) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: owner, Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	const ours = types.UID("job-uid")
	succeeded, failed, running := pod("a", corev1.PodSucceeded, ours), pod("b", corev1.PodFailed, ours), pod("c", corev1.PodRunning, ours)
	var deleted = metav1.Now()
	deletedPod := func(p corev1.Pod) corev1.Pod {
		p = *p.DeepCopy()
		p.DeletionTimestamp = &deleted
		return p
	}
	replacedWhileTerminating := func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed) }
	for name, tc := range map[string]struct {
		job  *batchv1.Job
		pods []corev1.Pod
		want bool
	}{
		"one pod succeeded":                            {job: job(), pods: []corev1.Pod{succeeded}, want: true},
		"a failed pod, then its replacement succeeded": {job: job(), pods: []corev1.Pod{failed, succeeded}, want: true},
		"NonIndexed, said":                             {job: job(func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion) }), pods: []corev1.Pod{succeeded}, want: true},
		"the built-in controller named":                {job: job(func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To(batchv1.JobControllerName) }), pods: []corev1.Pod{succeeded}, want: true},
		"a pod of another Job does not count":          {job: job(), pods: []corev1.Pod{succeeded, pod("x", corev1.PodRunning, "other")}, want: true},

		"no pod yet":                     {job: job(), want: false},
		"the pod still runs":             {job: job(), pods: []corev1.Pod{running}, want: false},
		"a pod of the Job not terminal":  {job: job(), pods: []corev1.Pod{succeeded, running}, want: false},
		"a pending pod":                  {job: job(), pods: []corev1.Pod{succeeded, pod("p", corev1.PodPending, ours)}, want: false},
		"a pod of unknown phase":         {job: job(), pods: []corev1.Pod{succeeded, pod("u", "", ours)}, want: false},
		"only failed pods":               {job: job(), pods: []corev1.Pod{failed}, want: false},
		"a succeeded pod of another Job": {job: job(), pods: []corev1.Pod{pod("x", corev1.PodSucceeded, "other")}, want: false},
		"two completions":                {job: job(func(j *batchv1.Job) { j.Spec.Completions = ptr.To[int32](2) }), pods: []corev1.Pod{succeeded}, want: false},
		"parallelism 2":                  {job: job(func(j *batchv1.Job) { j.Spec.Parallelism = ptr.To[int32](2) }), pods: []corev1.Pod{succeeded}, want: false},
		// A work-queue Job: a controller that has not seen the success wants parallelism pods, so a
		// raise of it would start a second pod.
		"completions not stored": {job: job(func(j *batchv1.Job) { j.Spec.Completions = nil }), pods: []corev1.Pod{succeeded}, want: false},
		// An Indexed Job's completions grow with its parallelism.
		"Indexed, one completion":                              {job: job(func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }), pods: []corev1.Pod{succeeded}, want: false},
		"replaced while terminating, the pod never deleted":    {job: job(replacedWhileTerminating), pods: []corev1.Pod{succeeded}, want: true},
		"replacement policy not stored, the pod never deleted": {job: job(func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = nil }), pods: []corev1.Pod{succeeded}, want: true},
		"replaced while terminating, a failed pod deleted":     {job: job(replacedWhileTerminating), pods: []corev1.Pod{deletedPod(failed), succeeded}, want: true},
		"replaced once terminal, the succeeded pod deleted":    {job: job(), pods: []corev1.Pod{deletedPod(succeeded)}, want: true},
		// A view from before its success saw it terminating, not active: a replacement may come.
		"replaced while terminating, the succeeded pod deleted": {job: job(replacedWhileTerminating), pods: []corev1.Pod{deletedPod(succeeded)}, want: false},
		"replacement policy not stored, the pod deleted":        {job: job(func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = nil }), pods: []corev1.Pod{deletedPod(succeeded)}, want: false},
		"replaced while terminating, a pod still terminating":   {job: job(replacedWhileTerminating), pods: []corev1.Pod{deletedPod(running), succeeded}, want: false},
		"another controller manages it":                         {job: job(func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/other") }), pods: []corev1.Pod{succeeded}, want: false},
		"suspended":                                             {job: job(func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }), pods: []corev1.Pod{succeeded}, want: false},
		"being deleted":                                         {job: job(func(j *batchv1.Job) { j.DeletionTimestamp = &deleted }), pods: []corev1.Pod{succeeded}, want: false},
		"finished already: the condition tells it": {job: job(func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}), pods: []corev1.Pod{succeeded}, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := OutcomeSettled(tc.job, tc.pods); got != tc.want {
				t.Errorf("OutcomeSettled = %t, want %t", got, tc.want)
			}
		})
	}
}
