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

// An outcome is what a step reached, in the words of status: the phase, status.message and the
// conditions it sets. Steps say what they reached with one of the constructors below and tell; only
// this file turns an outcome into phase and conditions, so what `kubectl get lj` and its conditions
// say has one home. Fields a step alone knows (the fence, the Job, the queue) it writes itself.
type outcome struct {
	phase      batchv1alpha1.LockedJobPhase // "": the phase stays
	message    string                       // status.message; "": it stays
	conditions []metav1.Condition           // type, status, reason and message of each it sets
	// clearQueue: the LockedJob is no longer in line, so its place and who blocked it go.
	clearQueue bool
}

// tell writes o into lj's status.
func tell(lj *batchv1alpha1.LockedJob, o outcome) {
	if o.phase != "" {
		lj.Status.Phase = o.phase
	}
	if o.message != "" {
		lj.Status.Message = o.message
	}
	if o.clearQueue {
		lj.Status.QueuePosition, lj.Status.BlockedBy = nil, ""
	}
	for _, c := range o.conditions {
		setCondition(lj, c.Type, c.Status, c.Reason, c.Message)
	}
}

func cond(condType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message}
}

// pending: the LockedJob has not acquired its lock yet, nor is it in line.
func pending() outcome { return outcome{phase: batchv1alpha1.PhasePending} }

// waitingFor: in line for the lock, or held back from it, for reason (Waiting, PermitsUnsupported).
func waitingFor(reason, msg string) outcome {
	return outcome{phase: batchv1alpha1.PhaseWaiting, message: msg,
		conditions: []metav1.Condition{cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, reason, msg)}}
}

// permitsRefused: held back from the lock, out of line, while it declares more permits than the
// operator's Redis admits.
func permitsRefused(msg string) outcome {
	o := waitingFor(batchv1alpha1.ReasonPermitsUnsupported, msg)
	o.clearQueue = true
	return o
}

// scopeRefused: the namespace may not use the lock's scope; it waits for the user, out of line.
func scopeRefused(msg string) outcome {
	return outcome{phase: batchv1alpha1.PhasePending, message: msg, clearQueue: true,
		conditions: []metav1.Condition{cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonScopeNotAllowed, msg)}}
}

// held: the lock is granted. A LockedJob that had not gone further is Pending until its Job runs.
func held(lj *batchv1alpha1.LockedJob, msg string) outcome {
	o := outcome{clearQueue: true, conditions: []metav1.Condition{cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionTrue, batchv1alpha1.ReasonAcquired, msg)}}
	if lj.Status.Phase == "" || lj.Status.Phase == batchv1alpha1.PhaseWaiting {
		o.phase = batchv1alpha1.PhasePending
	}
	return o
}

// running: the Job runs under the lock (reason JobRunning), or holds it with a stuck pod (PodStuck).
func running(reason, msg string) outcome {
	return outcome{phase: batchv1alpha1.PhaseRunning, message: msg,
		conditions: []metav1.Condition{cond(batchv1alpha1.ConditionJobRunning, metav1.ConditionTrue, reason, msg)}}
}

// released: the lock is no longer held by this LockedJob (msg says how).
func released(msg string) outcome {
	return outcome{conditions: []metav1.Condition{cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, msg)}}
}

// jobEnded: the Job completed (ok) or failed, in the Job's words (msg), and the lock was released.
func jobEnded(ok bool, msg string) outcome {
	phase, ending := batchv1alpha1.PhaseSucceeded, cond(batchv1alpha1.ConditionComplete, metav1.ConditionTrue, batchv1alpha1.ReasonJobComplete, msg)
	if !ok {
		phase, ending = batchv1alpha1.PhaseFailed, cond(batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobFailed, msg)
	}
	return outcome{phase: phase, message: msg + "; lock released",
		conditions: []metav1.Condition{ending, cond(batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, reasonOf(ok), msg)}}
}

// failedBefore: the operator failed the LockedJob before it ran (JobInvalid; LockTimeout, which
// also ends its wait for the lock).
func failedBefore(reason, msg string) outcome {
	o := outcome{phase: batchv1alpha1.PhaseFailed, message: msg, clearQueue: true}
	if reason == batchv1alpha1.ReasonLockTimeout {
		o.conditions = append(o.conditions, cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, reason, msg))
	}
	o.conditions = append(o.conditions, cond(batchv1alpha1.ConditionFailed, metav1.ConditionTrue, reason, msg))
	return o
}

// jobDeleted: the Job was deleted before it finished, and the lock was released.
func jobDeleted(msg string) outcome {
	return outcome{phase: batchv1alpha1.PhaseFailed, message: msg + "; lock released", conditions: []metav1.Condition{
		cond(batchv1alpha1.ConditionFailed, metav1.ConditionTrue, batchv1alpha1.ReasonJobDeleted, msg),
		cond(batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, batchv1alpha1.ReasonJobDeleted, msg)}}
}

// lockLost: the lock was lost while the Job ran (msg says how, and which policy was applied).
func lockLost(msg string) outcome {
	return outcome{phase: batchv1alpha1.PhaseLockLost, message: msg, conditions: []metav1.Condition{
		cond(batchv1alpha1.ConditionLockLost, metav1.ConditionTrue, batchv1alpha1.ReasonLockLost, msg),
		cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg),
		cond(batchv1alpha1.ConditionJobRunning, metav1.ConditionFalse, batchv1alpha1.ReasonLockLost, msg)}}
}

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
	// Its place and blocker were learnt while the scope was allowed (it was revoked since): not this
	// namespace's to show now.
	tell(p.lj, scopeRefused(msg))
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
