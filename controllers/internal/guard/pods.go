package guard

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ActivePods are the pods of the Job that have not stopped, found by the Job's controller-uid
// label (the Job API sets it, and the admission gate refuses a manual selector), from r (read the
// API server: a lock is released on what it says). A pod that succeeded or failed runs nothing,
// so it does not hold the lock back; every other pod counts until it is gone, terminating or not.
func ActivePods(ctx context.Context, r client.Reader, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	var active []corev1.Pod
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			active = append(active, pod)
		}
	}
	return active, nil
}
