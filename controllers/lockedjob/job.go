package lockedjob

import (
	"fmt"
	"maps"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// buildJob makes the Job of one acquisition from the template. The fencing token, lock, holder and
// slot (status.slot; 0 for a plain lock, which is slot 0 of its keys) reach every container as environment variables and the Job and its pods as annotations, so the
// workload can hand the token to the resource it protects.
//
// Some template fields are overridden because they would break the lock's promise; the CRD refuses
// them in new objects, and this covers objects stored before it did (see runsUnderTheLock).
func buildJob(lj *batchv1alpha1.LockedJob, name string, fence int64, holder string, scheme *runtime.Scheme) (*batchv1.Job, error) {
	tmpl := lj.Spec.JobTemplate
	slot := strconv.Itoa(int(derefInt32(lj.Status.Slot)))
	lockInfo := map[string]string{
		batchv1alpha1.AnnotationFencingToken: strconv.FormatInt(fence, 10),
		batchv1alpha1.AnnotationLock:         lj.Spec.Lock.Name,
		batchv1alpha1.AnnotationHolder:       holder,
		batchv1alpha1.AnnotationSlot:         slot,
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   lj.Namespace,
			Labels:      maps.Clone(tmpl.Labels),
			Annotations: maps.Clone(tmpl.Annotations),
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[batchv1alpha1.LabelLockedJob] = batchv1alpha1.NameLabelValue(lj.Name)
	job.Annotations = merged(job.Annotations, lockInfo)
	job.Annotations[batchv1alpha1.AnnotationLockedJob] = lj.Name
	job.Spec.Template.Annotations = merged(job.Spec.Template.Annotations, lockInfo)
	// The pods carry the same two names, so the operator's pod cache holds them and a pod's outcome
	// wakes its LockedJob (reconcile.NewPodCache).
	job.Spec.Template.Labels = merged(job.Spec.Template.Labels, map[string]string{batchv1alpha1.LabelLockedJob: job.Labels[batchv1alpha1.LabelLockedJob]})
	job.Spec.Template.Annotations[batchv1alpha1.AnnotationLockedJob] = lj.Name

	env := []corev1.EnvVar{
		{Name: batchv1alpha1.EnvFencingToken, Value: strconv.FormatInt(fence, 10)},
		{Name: batchv1alpha1.EnvLock, Value: lj.Spec.Lock.Name},
		{Name: batchv1alpha1.EnvHolder, Value: holder},
		{Name: batchv1alpha1.EnvSlot, Value: slot},
	}
	pod := &job.Spec.Template.Spec
	for i := range pod.InitContainers {
		pod.InitContainers[i].Env = append(pod.InitContainers[i].Env, env...)
	}
	for i := range pod.Containers {
		pod.Containers[i].Env = append(pod.Containers[i].Env, env...)
	}
	runsUnderTheLock(&job.Spec)
	if err := controllerutil.SetControllerReference(lj, job, scheme); err != nil {
		return nil, fmt.Errorf("own job %s: %w", name, err)
	}
	return job, nil
}

// runsUnderTheLock makes the Job run at once, one pod per completion slot at a time, and under the
// built-in Job controller:
//   - suspend would hold the lock while nothing runs;
//   - podReplacementPolicy Failed (unless the template chose one) starts a replacement pod only
//     after the failed one is gone, so two pods never run side by side with one token;
//   - a manual selector or another managedBy controller hides the pods that deletion and loss wait
//     for (the operator finds them by the job-name label the Job API sets).
//
// Pods of one Job still share its token: parallelism > 1 runs several under one holder.
func runsUnderTheLock(spec *batchv1.JobSpec) {
	spec.Suspend = ptr.To(false)
	if spec.PodReplacementPolicy == nil {
		spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	}
	spec.ManualSelector = nil
	spec.Selector = nil
	spec.ManagedBy = nil
}

func merged(base, extra map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, extra)
	return out
}

// stuckReasons are the waiting reasons of a container that will not start without someone fixing
// something; a pod merely being created (ContainerCreating, PodInitializing) is not stuck.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true,
}

// mayBeStuck reports whether the Job has pods and none of them is ready: only then is a look at the
// pods worth an API call.
func mayBeStuck(job *batchv1.Job) bool {
	return !reconcile.JobFinished(job) && job.Status.Active > 0 && derefInt32(job.Status.Ready) == 0
}
