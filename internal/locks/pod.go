package locks

import (
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

// IsGuardedPod reports whether pod is a guarded Pod: labelled LabelGuardLock and bare, with no
// controller owner. A controller's Pods are its own (a guarded Job's pods are the Job path's), as the
// admission policies of config/guard rule too.
func IsGuardedPod(pod *corev1.Pod) bool {
	_, labelled := pod.Labels[batchv1alpha1.LabelGuardLock]
	return labelled && metav1.GetControllerOf(pod) == nil
}

// ClaimantOfPod is the Claimant of a guarded Pod, by the rules of ClaimantOfJob: the lock its
// LabelGuardLock names, under the terms of its optional annotations, each checked again here and
// refused with the name of the label or annotation at fault.
func ClaimantOfPod(pod *corev1.Pod) (Claimant, error) { return claimantOfLabelled(KindPod, pod) }
