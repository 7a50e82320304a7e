package lockedjob

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// CacheOptions are the settings of the manager's cache that the reconcilers are written for:
//   - Jobs: only those the operator created (they carry LabelLockedJob), so the other Jobs of a
//     cluster cost it no watch event and no memory; and without their pod templates, which the
//     operator never reads after it built them (a Job's status, owner and suspend are what it
//     needs). A Job that loses the label leaves the cache; findJob still finds it on the API
//     server, and while it runs its pass looks again on its own (Config.UnwatchedJobRecheck).
//   - every kind: without managedFields, which nothing here reads.
//
// The operator writes Jobs only by merge patches of the fields it changes (suspend) and deletes,
// never by an update of a cached object, so what the cache leaves out is never written back.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: ownJobs(), Transform: stripJob},
		},
	}
}

// ownJobs selects the Jobs the operator created, and their pods.
func ownJobs() labels.Selector {
	req, err := labels.NewRequirement(batchv1alpha1.LabelLockedJob, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key that is a valid label key
	}
	return labels.NewSelector().Add(*req)
}

// watched reports whether the cache follows the Job (it carries the label ownJobs selects), so its
// changes start a pass; a Job found only on the API server may not be in the cache yet.
func watched(job *batchv1.Job) bool {
	_, ok := job.Labels[batchv1alpha1.LabelLockedJob]
	return ok
}

// stripJob drops what the operator never reads of a cached Job: its pod template (most of a Job's
// size) and managedFields.
func stripJob(in any) (any, error) {
	if job, ok := in.(*batchv1.Job); ok {
		job.ManagedFields = nil
		job.Spec.Template = corev1.PodTemplateSpec{}
	}
	return in, nil
}

// The pods of the operator's Jobs are in a cache of the reconciler's own
// (reconcile.NewPodCache), selected by LabelLockedJob, which buildJob puts in the pod template.

// podSucceededFirst wakes the LockedJob whose Job's pod just succeeded (the pod names it by
// AnnotationLockedJob), ahead of other work: its pass may release the lock at the pod's outcome.
func podSucceededFirst() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod := e.ObjectNew
			name := pod.Annotations[batchv1alpha1.AnnotationLockedJob]
			if name == "" || !sreconcile.Succeeded(e.ObjectOld, pod) {
				return
			}
			atPriority(q, priorityJobEnded).Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: name}})
		},
	}
}
