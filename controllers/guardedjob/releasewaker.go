package guardedjob

import (
	"context"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Release wake-ups (guard.ReleaseWaker): a handoff to a guarded Job wakes that Job alone, a plain
// release the lock's suspended guarded Jobs.

// namedJob names a Job in a wake-up.
func namedJob(namespace, name string) client.Object {
	job := &batchv1.Job{}
	job.Namespace, job.Name = namespace, name
	return job
}

// waiters are the waiting guarded Jobs of the lock whose Redis key is key (every lock's for "").
func (r *GuardedJobReconciler) waiters(ctx context.Context, key string) []client.Object {
	list := &batchv1.JobList{}
	var opts []client.ListOption
	if key != "" {
		opts = append(opts, client.MatchingFields{fieldLockKey: key})
	}
	if err := r.Jobs.List(ctx, list, opts...); err != nil {
		return nil
	}
	var out []client.Object
	for i := range list.Items {
		if waiting(&list.Items[i]) {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

// waiting tells a guarded Job that waits in line: still suspended by the gate and never fenced. A
// Job that Kueue admits waits for the AdmissionCheck, not for this reconciler.
func waiting(job *batchv1.Job) bool {
	if !locks.IsGuardedJob(job) {
		return false
	}
	_, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]
	return !fenced && job.Spec.Suspend != nil && *job.Spec.Suspend
}
