package reconcile

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobFinished reports whether the Job reached a terminal condition (Complete or Failed). A finished
// Job runs nothing: the Job controller adds Complete or Failed only once none of its pods is
// terminating or uncounted (enactJobFinished in pkg/controller/job; the delay came with
// JobPodReplacementPolicy and JobManagedBy, on by default since 1.31 and unconditional since 1.35),
// so the lock it runs under may be released on this word alone, without listing its pods. The one
// rule for every reconciler that releases a Job's lock.
func JobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// JobOutcome says whether a finished Job succeeded, and how it ended in a sentence.
func JobOutcome(job *batchv1.Job) (bool, string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, fmt.Sprintf("Job %s completed", job.Name)
		case batchv1.JobFailed:
			return false, fmt.Sprintf("Job %s failed: %s %s", job.Name, c.Reason, c.Message)
		}
	}
	return false, fmt.Sprintf("Job %s has not finished", job.Name)
}

// SettlesOnPods reports whether the Job's outcome can be read off its pods before the Job
// controller writes its condition (see OutcomeSettled): a Job of the built-in controller, running
// (not suspended, not being deleted, not finished), of one pod at a time to one completion. Any
// other shape waits for the condition.
//
// The one completion must be stated (the API defaults it to 1 when neither completions nor
// parallelism is given) and fixed (NonIndexed: an Indexed Job's completions may grow with its
// parallelism). Parallelism may be raised at any time, and a Job controller that has not yet seen
// the success then wants min(parallelism, completions - succeeded) = 1 pod active: the one that
// succeeded, which it sees running. Without completions it would want parallelism pods, and
// create a second beside the one it still sees running, after the lock went.
func SettlesOnPods(job *batchv1.Job) bool {
	spec := job.Spec
	return spec.Completions != nil && *spec.Completions == 1 && atMostOne(spec.Parallelism) &&
		(spec.CompletionMode == nil || *spec.CompletionMode == batchv1.NonIndexedCompletion) &&
		(spec.ManagedBy == nil || *spec.ManagedBy == batchv1.JobControllerName) &&
		(spec.Suspend == nil || !*spec.Suspend) &&
		job.DeletionTimestamp.IsZero() && !JobFinished(job)
}

func atMostOne(n *int32) bool { return n == nil || *n == 1 }

// OutcomeSettled reports whether nothing of the Job can run again although it has not finished
// yet: it SettlesOnPods, one of the pods it controls has Succeeded (and, unless its failed pods
// are replaced only once terminal, that pod was never deleted), and every pod it controls (of
// pods, which may hold others) is Succeeded or Failed. Its lock may then be released before the
// Job controller's Complete, which comes a second or more later (it batches pod updates, records
// the pod, removes its tracking finalizer, and only then adds the condition).
//
// Why no pod of it can run after that: a terminal phase is final (the API refuses a change out of
// it), so the succeeded pod runs nothing again. The Job controller creates a pod only while fewer
// pods have succeeded than the Job needs (one) and fewer are active than parallelism (one); a
// controller that has seen the success creates none, and one working on an older view must see
// that pod active, which also creates none. Active is where the replacement policy matters: with
// podReplacementPolicy Failed a pod counts as active until it is terminal; with TerminatingOrFailed
// (the Job API's default without a podFailurePolicy, what most guarded Jobs have) a pod stops
// counting once it has a deletionTimestamp. A deletionTimestamp is never taken away, so a
// succeeded pod that has none now had none in any view of it: every view saw it running or
// succeeded. Its tracking finalizer keeps the pod until the controller has counted it. The check
// that every pod is terminal only restates that; it costs nothing.
func OutcomeSettled(job *batchv1.Job, pods []corev1.Pod) bool {
	if !SettlesOnPods(job) {
		return false
	}
	replacedWhenTerminal := job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed
	succeeded := false
	for i := range pods {
		pod := &pods[i]
		if !metav1.IsControlledBy(pod, job) {
			continue
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded:
			succeeded = succeeded || replacedWhenTerminal || pod.DeletionTimestamp.IsZero()
		case corev1.PodFailed:
		default:
			return false
		}
	}
	return succeeded
}
