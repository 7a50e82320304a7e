package guardedjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
)

// Recording: a guarded Job has no status of ours, so what a LockedJob's status holds goes into the
// Job's annotations, each time by one merge patch that carries the resourceVersion the pass read:
// a pass that read a stale Job writes nothing (the API server answers Conflict, and the pass runs
// again on the Job as it is).

// patchJob applies change to the pass's Job and writes the difference.
func (r *GuardedJobReconciler) patchJob(ctx context.Context, p *pass, what string, change func(*batchv1.Job)) error {
	base := p.job.DeepCopy()
	change(p.job)
	if err := r.Client.Patch(ctx, p.job, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("%s: patch job %s: %w", what, p.job.Name, err)
	}
	return nil
}

// recordGuard writes the guard state alone.
func (r *GuardedJobReconciler) recordGuard(ctx context.Context, p *pass, g batchv1alpha1.GuardState) error {
	return r.patchJob(ctx, p, "record "+string(g), func(job *batchv1.Job) {
		guard.Annotate(job, batchv1alpha1.AnnotationGuard, string(g))
	})
}
