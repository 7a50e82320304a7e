package lockedjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
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

// The pods of the operator's Jobs, in a cache of their own (NewPodCache), so a held lock can go at
// the pod's outcome, a second or more before the Job controller writes the Job's (see
// reconcile.OutcomeSettled). buildJob labels the pod template with LabelLockedJob; the cache is
// selected by it on the API server, so the cluster's other pods cost no watch event and no memory,
// and pods of Jobs built before the label (which wait for the Job's condition) are not in it.
// What a cached pod keeps: metadata and phase, all the decision reads.

// NewPodCache is the cache of the operator's pods. Add it to the manager before the controller that
// watches it.
func NewPodCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: ownJobs(), Transform: stripPod},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lockedjob pod cache: %w", err)
	}
	return c, nil
}

// stripPod keeps of a pod its metadata and phase.
func stripPod(in any) (any, error) {
	if pod, ok := in.(*corev1.Pod); ok {
		pod.ManagedFields = nil
		pod.Spec = corev1.PodSpec{}
		pod.Status = corev1.PodStatus{Phase: pod.Status.Phase}
	}
	return in, nil
}

// fieldJobUID indexes the cached pods by the UID of the Job that controls them.
const fieldJobUID = "lockedjobJobUID"

func indexPodsByJob(ctx context.Context, c cache.Cache) error {
	err := c.IndexField(ctx, &corev1.Pod{}, fieldJobUID, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Job" {
			return []string{string(ref.UID)}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index pods by job: %w", err)
	}
	return nil
}

// podsOfJob are the cached pods the Job controls.
func (r *LockedJobReconciler) podsOfJob(ctx context.Context, job *batchv1.Job) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.Pods.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingFields{fieldJobUID: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("list cached pods of job %s: %w", job.Name, err)
	}
	return pods.Items, nil
}

// podSucceededFirst wakes the LockedJob whose Job's pod just succeeded (the pod names it by
// AnnotationLockedJob), ahead of other work: its pass may release the lock at the pod's outcome.
func podSucceededFirst() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod := e.ObjectNew
			name := pod.Annotations[batchv1alpha1.AnnotationLockedJob]
			if name == "" || pod.Status.Phase != corev1.PodSucceeded || e.ObjectOld.Status.Phase == corev1.PodSucceeded {
				return
			}
			atPriority(q, priorityJobEnded).Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: name}})
		},
	}
}
