package lockedjob

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/reconcile"
)

// setCondition sets one condition, stamped with the object's generation. LastTransitionTime is
// truncated to seconds, as it will be after a round trip through the API server, so comparing the
// object before and after a pass does not see a change that is not there.
func setCondition(lj *batchv1alpha1.LockedJob, condType string, status metav1.ConditionStatus, reason, message string) {
	message = reconcile.CutMessage(message)
	meta.SetStatusCondition(&lj.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: lj.Generation,
		LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second)),
	})
}

func conditionTrue(lj *batchv1alpha1.LockedJob, condType string) bool {
	return meta.IsStatusConditionTrue(lj.Status.Conditions, condType)
}

func conditionFalse(lj *batchv1alpha1.LockedJob, condType string) bool {
	return meta.IsStatusConditionFalse(lj.Status.Conditions, condType)
}

// summarize sets the conditions that sum up the others, before every status write. It cuts
// status.message there, the one place every writer's message passes.
func summarize(lj *batchv1alpha1.LockedJob) {
	lj.Status.Message = reconcile.CutMessage(lj.Status.Message)
	setReady(lj)
	setFinished(lj)
}

// setFinished is True once the phase is terminal, with the reason of the condition that ended it
// (JobComplete, JobFailed, LockTimeout, JobInvalid, JobDeleted, LockLost), and False before.
func setFinished(lj *batchv1alpha1.LockedJob) {
	var ending string
	switch lj.Status.Phase {
	case batchv1alpha1.PhaseSucceeded:
		ending = batchv1alpha1.ConditionComplete
	case batchv1alpha1.PhaseFailed:
		ending = batchv1alpha1.ConditionFailed
	case batchv1alpha1.PhaseLockLost:
		ending = batchv1alpha1.ConditionLockLost
	default:
		setCondition(lj, batchv1alpha1.ConditionFinished, metav1.ConditionFalse, batchv1alpha1.ReasonInProgress, "The LockedJob has not reached its end")
		return
	}
	reason, msg := string(lj.Status.Phase), lj.Status.Message
	if c := meta.FindStatusCondition(lj.Status.Conditions, ending); c != nil && c.Status == metav1.ConditionTrue {
		reason = c.Reason
	}
	setCondition(lj, batchv1alpha1.ConditionFinished, metav1.ConditionTrue, reason, msg)
}

// setReady summarises the others: Ready is True while the Job runs under its lock and once it has
// succeeded, and False with the reason otherwise. Redis trouble outranks the phase while the
// LockedJob is not finished, because it is what blocks progress.
func setReady(lj *batchv1alpha1.LockedJob) {
	msg := lj.Status.Message
	if c := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionRedisAvailable); c != nil &&
		c.Status == metav1.ConditionFalse && !lj.Status.Phase.IsTerminal() {
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, c.Message)
		return
	}
	switch lj.Status.Phase {
	case batchv1alpha1.PhaseRunning:
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionTrue, batchv1alpha1.ReasonJobRunning, msg)
	case batchv1alpha1.PhaseSucceeded:
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionTrue, batchv1alpha1.ReasonJobComplete, msg)
	case batchv1alpha1.PhaseWaiting:
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionFalse, batchv1alpha1.ReasonWaiting, msg)
	case batchv1alpha1.PhaseFailed:
		reason := batchv1alpha1.ReasonJobFailed
		if c := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionFailed); c != nil {
			reason = c.Reason
		}
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	case batchv1alpha1.PhaseLockLost:
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)
	default:
		reason := batchv1alpha1.ReasonPending
		if c := meta.FindStatusCondition(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired); c != nil && c.Status == metav1.ConditionFalse {
			reason = c.Reason
		}
		if msg == "" {
			msg = "Not yet reconciled"
		}
		setCondition(lj, batchv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	}
}

func (r *LockedJobReconciler) markScopeNotAllowed(p *pass) {
	// The allowed namespaces are not named: they are other tenants' business (the operator's admin
	// knows them from --cluster-scope-namespaces).
	msg := fmt.Sprintf("spec.lock.scope Cluster is not allowed in namespace %s: ask the operator's admin to add it to --cluster-scope-namespaces, or use scope Namespace", p.lj.Namespace)
	p.lj.Status.Phase = batchv1alpha1.PhasePending
	p.lj.Status.Message = msg
	setCondition(p.lj, batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonScopeNotAllowed, msg)
	// Learnt while the scope was allowed (it was revoked since): not this namespace's to show now.
	p.lj.Status.QueuePosition, p.lj.Status.BlockedBy = nil, ""
}

// redisDown records a Redis failure and returns err for the runtime's backoff.
func (r *LockedJobReconciler) redisDown(p *pass, err error) error {
	msg := fmt.Sprintf("Redis unavailable: %v", err)
	if !conditionFalse(p.lj, batchv1alpha1.ConditionRedisAvailable) {
		r.event(p.lj, corev1.EventTypeWarning, batchv1alpha1.ReasonRedisUnavailable, "Redis", "%s", msg)
	}
	setCondition(p.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionFalse, batchv1alpha1.ReasonRedisUnavailable, msg)
	return err
}

func (r *LockedJobReconciler) redisUp(p *pass) {
	setCondition(p.lj, batchv1alpha1.ConditionRedisAvailable, metav1.ConditionTrue, batchv1alpha1.ReasonRedisOK, "Redis answered")
}

func reasonOf(ok bool) string {
	if ok {
		return batchv1alpha1.ReasonJobComplete
	}
	return batchv1alpha1.ReasonJobFailed
}
