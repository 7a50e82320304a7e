package reconcile

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
