package reconcile

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The pods of the Jobs a reconciler holds locks for, in a cache of its own, so a held lock can go
// at the pod's outcome, a second or more before the Job controller writes the Job's (see
// OutcomeSettled). The cache is selected on the API server by a label the operator puts in the
// Job's pod template, so the cluster's other pods cost no watch event and no memory, and pods of
// Jobs labelled before (which wait for the Job's condition) are not in it. What a cached pod keeps:
// metadata and phase, all OutcomeSettled reads.

// fieldPodJobUID indexes cached pods by the UID of the Job that controls them.
const fieldPodJobUID = "podJobUID"

// NewPodCache is a cache of the pods the selector picks, indexed by their controlling Job (see
// PodsOfJob), added to the manager (call it before the controller that watches it is set up).
func NewPodCache(ctx context.Context, mgr ctrl.Manager, name string, selector labels.Selector) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: selector, Transform: stripPod},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s pod cache: %w", name, err)
	}
	err = c.IndexField(ctx, &corev1.Pod{}, fieldPodJobUID, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Job" {
			return []string{string(ref.UID)}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index %s pods by job: %w", name, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add %s pod cache: %w", name, err)
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

// PodsOfJob are the pods of a NewPodCache that the Job controls.
func PodsOfJob(ctx context.Context, pods client.Reader, job *batchv1.Job) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := pods.List(ctx, list, client.InNamespace(job.Namespace), client.MatchingFields{fieldPodJobUID: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("list cached pods of job %s: %w", job.Name, err)
	}
	return list.Items, nil
}

// Succeeded reports a pod update that brings the pod to Succeeded: the event that may settle its
// Job's outcome.
func Succeeded(old, cur *corev1.Pod) bool {
	return cur.Status.Phase == corev1.PodSucceeded && old.Status.Phase != corev1.PodSucceeded
}

// JobOfSucceededPod wakes the Job whose pod just succeeded (its controller), for a reconciler whose
// requests name Jobs: its pass may release the lock at the pod's outcome (OutcomeSettled).
func JobOfSucceededPod() handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod := e.ObjectNew
			ref := metav1.GetControllerOf(pod)
			if ref == nil || ref.Kind != "Job" || !Succeeded(e.ObjectOld, pod) {
				return
			}
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}})
		},
	}
}
