package guardedpod

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// observe builds the pass: who the Pod is to the lock, and what the Pod and the book say. It reads
// nothing from Redis or the API server.
func (r *GuardedPodReconciler) observe(pod *corev1.Pod) *pass {
	p := &pass{pod: pod}
	id := r.Config.Identity
	claimant, err := locks.ClaimantOfPod(pod)
	if held, ok := guard.HeldLock(pod, id, r.Locks.LibraryKey); ok {
		claimant, p.drift = held.Over(locks.KindPod, pod, claimant, err)
	} else if err != nil {
		p.obs.invalid = err
		return p
	}
	p.claimant = claimant
	p.claim = lockbook.Claim{Key: id.LockKey(claimant), Token: id.Token(claimant), Holder: id.Holder(claimant), Slot: guard.RecordedSlot(pod), Fence: guard.RecordedFence(pod)}
	book := r.Locks.RecordOf(pod.UID)
	_, fenced := pod.Annotations[batchv1alpha1.AnnotationFencingToken]
	deleting := !pod.DeletionTimestamp.IsZero()
	ended := podEnded(pod)
	p.obs = observation{
		deleting:     deleting,
		hasFinalizer: controllerutil.ContainsFinalizer(pod, guard.Finalizer),
		gated:        gated(pod),
		fenced:       fenced,
		ended:        ended,
		runsNothing:  ended || (deleting && pod.Spec.NodeName == ""),
		guard:        batchv1alpha1.GuardState(pod.Annotations[batchv1alpha1.AnnotationGuard]),
		scopeAllowed: r.Config.ClusterScopeNamespaces.Allows(claimant),
		holding:      book.Lock,
		lost:         book.Lost,
		released:     book.Released,
	}
	return p
}

// podEnded: the kubelet writes a terminal phase only once the Pod's containers stopped (the pod
// garbage collector, for the Pods of a node that is gone).
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// workloadOf is what the lock book knows of the Pod: enough to stop it and wake this reconciler.
func (p *pass) workloadOf() lockbook.Workload { return lockbook.WorkloadOf(p.claimant, p.pod.Name) }
