package guardedjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// The guarded Jobs the reconciler follows, in a cache of its own.
//
// Not the manager's cache: that one keeps only the operator's own Jobs (lockedjob.CacheOptions),
// so the other Jobs of a cluster cost it no watch event and no memory, and a cache holds one
// selector per kind. Widening it to every Job would bring back that cost; a second informer,
// selected by the lock label on the API server, keeps every unlabelled Job out of memory and off
// the wire. Its Jobs lose their pod templates and managedFields: the reconciler reads only
// metadata, suspend and conditions, and writes by merge patches of the fields it changes, so what
// the cache leaves out is never written back.

// NewCache is the cache of guarded Jobs (locks.GuardedJobs: those with LabelGuardLock and without
// LabelLockedJob), those Kueue admits included: the reconciler acts only on locks.IsGuardedJob, the
// AdmissionCheck (controllers/kueuecheck) reads the others from it, and the per-lock view sees both. Add it to the manager (a cache is a runnable) before the controller that watches it.
func NewCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: locks.GuardedJobs(), Transform: stripJob},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("guarded job cache: %w", err)
	}
	return c, nil
}

// stripJob drops the pod template and managedFields of a cached Job.
func stripJob(in any) (any, error) {
	if job, ok := in.(*batchv1.Job); ok {
		job.ManagedFields = nil
		job.Spec.Template = corev1.PodTemplateSpec{}
	}
	return in, nil
}

// fieldLockKey indexes guarded Jobs by the Redis key of their lock, for release wake-ups.
const fieldLockKey = "guardedLockKey"

// indexLockKey indexes the cache's Jobs by the Redis key of the lock their label and annotations
// ask for (none for a Job whose claim does not parse).
func indexLockKey(ctx context.Context, c cache.Cache, id locks.Identity, book *lockbook.Book) error {
	err := c.IndexField(ctx, &batchv1.Job{}, fieldLockKey, func(o client.Object) []string {
		claimant, err := locks.ClaimantOfJob(o.(*batchv1.Job))
		if err != nil {
			return nil
		}
		return []string{book.RedisKey(id.LockKey(claimant))}
	})
	if err != nil {
		return fmt.Errorf("index guarded jobs by lock key: %w", err)
	}
	return nil
}

// guardedPods selects the pods of the guarded Jobs the operator unsuspended (LabelGuardedJobPod
// GuardedJobPodUnsuspended, which unsuspend puts in the pod template). Pods of a Job Kueue admitted
// carry the label's other value and are the Kueue check's (controllers/kueuecheck); pods of a Job
// unsuspended by an earlier version carry none, and their locks wait for the Job's condition.
func guardedPods() labels.Selector {
	return labels.SelectorFromSet(labels.Set{batchv1alpha1.LabelGuardedJobPod: batchv1alpha1.GuardedJobPodUnsuspended})
}
