package guardedjob

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Deleting (stepDeleteRelease): the lock is held until the Job's pods are gone. Our finalizer keeps
// the Job, and with it the lock's record, until then; a Job deleted while the operator was down,
// or deleted with propagationPolicy Orphan, still names its lock here. Its running pods are
// deleted by the operator, which alone can stop them while the Job is kept.

// deleteRelease waits until no pod of the Job runs, then releases the lock (if ours) and drops the
// finalizer. Nobody else stops the pods of a deleted Job while our finalizer keeps it: the garbage
// collector deletes a background deletion's pods only once the Job is gone, and the Job controller
// leaves a Job that is being deleted alone (suspending it would delete nothing). So the pass
// deletes the Job's running pods itself, each with its UID as precondition, and looks again.
func (r *GuardedJobReconciler) deleteRelease(ctx context.Context, p *pass) (ctrl.Result, error) {
	if !p.obs.finished {
		pods, err := r.activePods(ctx, p.job)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(pods) > 0 {
			if err := r.deletePods(ctx, p, pods); err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{RequeueAfter: podRecheck}, nil
		}
	}
	if !ended(p.obs.guard) || p.obs.holding != nil {
		if err := r.release(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return ctrl.Result{}, err
		}
	}
	err := r.patchJob(ctx, p, "remove finalizer", func(job *batchv1.Job) { controllerutil.RemoveFinalizer(job, finalizer) })
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.Locks.Forget(p.job.UID)
	return ctrl.Result{}, nil
}

// deletePods deletes the running pods of a deleted Job that are not terminating yet; they keep
// their grace period, and the lock covers them until they are gone. A deletion that orphans the
// Job's pods asked for them to run on: the garbage collector takes them from the Job (while the
// Job carries the orphan finalizer), and the lock covers them until they end by themselves; only
// the pods the Job still controls are deleted.
func (r *GuardedJobReconciler) deletePods(ctx context.Context, p *pass, pods []corev1.Pod) error {
	if controllerutil.ContainsFinalizer(p.job, metav1.FinalizerOrphanDependents) {
		return nil
	}
	for i := range pods {
		pod := &pods[i]
		ref := metav1.GetControllerOf(pod)
		if !pod.DeletionTimestamp.IsZero() || ref == nil || ref.UID != p.job.UID {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting a pod of the deleted Job", "pod", klog.KObj(pod))
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s of job %s: %w", pod.Name, p.job.Name, err)
		}
	}
	return nil
}
