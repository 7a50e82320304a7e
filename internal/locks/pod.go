package locks

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// LabelledPods selects the Pods that carry LabelGuardLock, for the guarded-Pod reconciler's cache
// (the API server selects by labels only); IsGuardedPod tells which of them are guarded.
func LabelledPods() labels.Selector {
	guard, err := labels.NewRequirement(batchv1alpha1.LabelGuardLock, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key that is a valid label key
	}
	return labels.NewSelector().Add(*guard)
}

// IsGuardedPod reports whether pod is a guarded Pod: labelled LabelGuardLock and not controlled by
// a batch/v1 Job (JobControllerOf). A Job's pods are the Job path's: a guarded Job holds the lock
// for all its pods, so its labelled pod template must not make each pod queue on its own. Any other
// controller (an Argo Workflow, a Tekton TaskRun) creates its Pods one by one and leaves them to us,
// as the admission policies of config/guard rule too.
func IsGuardedPod(pod *corev1.Pod) bool {
	_, labelled := pod.Labels[batchv1alpha1.LabelGuardLock]
	return labelled && JobControllerOf(pod) == nil
}

// JobControllerOf is the ownerReference of pod's controller when that is a batch/v1 Job, else nil.
// An ownerReference to a Job without controller: true does not count: the Job controller adopts
// and counts only the Pods it controls.
func JobControllerOf(pod *corev1.Pod) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil
	}
	return ref
}

// ClaimantOfPod is the Claimant of a guarded Pod, by the rules of ClaimantOfJob: the lock its
// LabelGuardLock names, under the terms of its optional annotations, each checked again here and
// refused with the name of the label or annotation at fault.
func ClaimantOfPod(pod *corev1.Pod) (Claimant, error) { return claimantOfLabelled(KindPod, pod) }
