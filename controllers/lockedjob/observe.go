package lockedjob

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Observing: what a pass reads before it decides (the LockedJob, the lock book, the Job, stuck pods).

// observe fills p.obs: the object's own record, the lock book, and the Job. A Job that the cache
// does not have is looked up on the API server before anything is decided, so a Job that was just
// created (or is about to be stopped) is never taken for a missing one.
func (r *LockedJobReconciler) observe(ctx context.Context, p *pass) error {
	lj := p.lj
	book := r.Locks.RecordOf(lj.UID)
	p.obs = observation{
		deleting:     !lj.DeletionTimestamp.IsZero(),
		hasFinalizer: controllerutil.ContainsFinalizer(lj, finalizer),
		terminal:     lj.Status.Phase.IsTerminal(),
		lockRecorded: conditionTrue(lj, batchv1alpha1.ConditionLockAcquired),
		scopeAllowed: r.Config.ClusterScopeNamespaces.Allows(locks.ClaimantOf(lj)),
		holding:      book.Lock,
		lost:         book.Lost,
		released:     book.Released || lj.Status.ReleasedAt != nil,
	}
	if lj.Status.JobUID == "" && book.JobUID != "" {
		// The Job of this acquisition was created by a pass whose record the cache has not shown yet
		// (or that lost a conflict): the book's is the newer word.
		lj.Status.JobName, lj.Status.JobUID = book.Job, book.JobUID
	}
	p.obs.jobCreated = lj.Status.JobUID != ""
	name := lj.Status.JobName
	if name == "" {
		name = book.Job // a stale object may lack what an earlier pass recorded
	}
	if name == "" {
		return nil
	}
	job, err := r.findJob(ctx, lj, name)
	if err != nil {
		return err
	}
	p.obs.job = job
	if job != nil && lj.Status.JobUID == "" {
		lj.Status.JobName, lj.Status.JobUID = job.Name, job.UID
		p.obs.jobCreated = true
	}
	if job != nil && r.Pods != nil && mayHoldRunning(p.obs) && reconcile.SettlesOnPods(job) {
		pods, err := reconcile.PodsOfJob(ctx, r.Pods, job)
		if err != nil {
			return err
		}
		p.obs.settled = reconcile.OutcomeSettled(job, pods)
	}
	// Pods are listed only once the Job has had stuckRecheck to start them: a pod that starts in
	// seconds, as nearly all do, costs no LIST (which the API server answers by scanning the pods
	// of the namespace, thousands of them under a burst).
	if job != nil && mayBeStuck(job) && r.Clock.Since(job.CreationTimestamp.Time) >= stuckRecheck {
		p.obs.stuck = r.stuckPod(ctx, job)
	}
	return nil
}

// mayHoldRunning reports whether the pass sees a LockedJob whose lock may be held while its Job
// runs: only then is there a lock to give back at the pod's outcome.
func mayHoldRunning(o observation) bool {
	return !o.deleting && !o.terminal && !o.released && o.lost == nil && (o.holding != nil || o.lockRecorded)
}

// findJob reads the named Job of this LockedJob from the cache, else from the API server. It
// returns nil when neither has it; a Job of that name that this LockedJob does not control is an
// error, never adopted.
func (r *LockedJobReconciler) findJob(ctx context.Context, lj *batchv1alpha1.LockedJob, name string) (*batchv1.Job, error) {
	key := client.ObjectKey{Namespace: lj.Namespace, Name: name}
	job := &batchv1.Job{}
	err := r.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, job)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", name, err)
	}
	if !metav1.IsControlledBy(job, lj) {
		return nil, fmt.Errorf("job %s exists and does not belong to this LockedJob", name)
	}
	return job, nil
}

// podsOf counts the pods of the named Job, from the API server, reading metadata only: the operator
// never needs pod specs (and their environment values).
func (r *LockedJobReconciler) podsOf(ctx context.Context, namespace, jobName string) (int, error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return 0, fmt.Errorf("list pods of job %s: %w", jobName, err)
	}
	return len(pods.Items), nil
}

// stuckPod says, in the kubelet's words, why a pod of the Job cannot start, or "" when none is
// stuck. A failed look is not worth failing the pass for: it only feeds the status message.
func (r *LockedJobReconciler) stuckPod(ctx context.Context, job *batchv1.Job) string {
	pods := &corev1.PodList{}
	err := r.APIReader.List(ctx, pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.JobNameLabel: job.Name}, client.Limit(8))
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("listing pods for a stuck container failed", "Job", klog.KObj(job), "error", err.Error())
		return ""
	}
	for _, pod := range pods.Items {
		for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Sprintf("pod %s container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}
