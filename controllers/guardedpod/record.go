package guardedpod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
)

// Recording: a guarded Pod has no status of ours, so what a LockedJob's status holds goes into the
// Pod's annotations, each time by one merge patch that carries the resourceVersion the pass read: a
// pass that read a stale Pod writes nothing.

// patchPod applies change to the pass's Pod and writes the difference.
func (r *GuardedPodReconciler) patchPod(ctx context.Context, p *pass, what string, change func(*corev1.Pod)) error {
	base := p.pod.DeepCopy()
	change(p.pod)
	if err := r.Client.Patch(ctx, p.pod, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("%s: patch pod %s: %w", what, p.pod.Name, err)
	}
	return nil
}

// recordGuard writes the guard state alone.
func (r *GuardedPodReconciler) recordGuard(ctx context.Context, p *pass, g batchv1alpha1.GuardState) error {
	return r.patchPod(ctx, p, "record "+string(g), func(pod *corev1.Pod) {
		guard.Annotate(pod, batchv1alpha1.AnnotationGuard, string(g))
	})
}
