package guardedpod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// The labelled Pods the reconciler follows, in a cache of its own, selected on the API server by the
// lock label (locks.LabelledPods), so the cluster's other Pods cost no watch event and no memory.
// Its Pods lose their containers, volumes and managedFields: the reconciler reads metadata, phase,
// nodeName and the scheduling gates, and writes by merge patches of the fields it changes, so what
// the cache leaves out is never written back.

// NewCache is the cache of labelled Pods. Add it to the manager before the controller that watches it.
func NewCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: locks.LabelledPods(), Transform: stripPod},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("guarded pod cache: %w", err)
	}
	return c, nil
}

// stripPod drops what the reconciler never reads of a cached Pod.
func stripPod(in any) (any, error) {
	if pod, ok := in.(*corev1.Pod); ok {
		pod.ManagedFields = nil
		pod.Spec.Containers, pod.Spec.InitContainers, pod.Spec.Volumes = nil, nil, nil
		pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses = nil, nil
	}
	return in, nil
}

// fieldLockKey indexes guarded Pods by the Redis key of their lock, for wake-ups.
const fieldLockKey = "guardedLockKey"

func indexLockKey(ctx context.Context, c cache.Cache, id locks.Identity, book *lockbook.Book) error {
	err := c.IndexField(ctx, &corev1.Pod{}, fieldLockKey, func(o client.Object) []string {
		pod := o.(*corev1.Pod)
		if !locks.IsGuardedPod(pod) {
			return nil
		}
		claimant, err := locks.ClaimantOfPod(pod)
		if err != nil {
			return nil
		}
		return []string{book.RedisKey(id.LockKey(claimant))}
	})
	if err != nil {
		return fmt.Errorf("index guarded pods by lock key: %w", err)
	}
	return nil
}

// namedPod names a Pod in a wake-up.
func namedPod(namespace, name string) client.Object {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = namespace, name
	return pod
}

// waiters are the waiting guarded Pods of the lock whose Redis key is key (every lock's for "").
func (r *GuardedPodReconciler) waiters(ctx context.Context, key string) []client.Object {
	list := &corev1.PodList{}
	var opts []client.ListOption
	if key != "" {
		opts = append(opts, client.MatchingFields{fieldLockKey: key})
	}
	if err := r.Pods.List(ctx, list, opts...); err != nil {
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

// waiting tells a guarded Pod that waits in line: behind our gate, never fenced.
func waiting(pod *corev1.Pod) bool {
	_, fenced := pod.Annotations[batchv1alpha1.AnnotationFencingToken]
	return !fenced && gated(pod) && locks.IsGuardedPod(pod)
}

// gated tells a Pod our scheduling gate holds back.
func gated(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == batchv1alpha1.SchedulingGateGuard {
			return true
		}
	}
	return false
}
