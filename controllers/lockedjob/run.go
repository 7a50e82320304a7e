package lockedjob

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
)

// Running (stepCreateJob, stepRunning): the Job of an acquisition, created once under its fencing
// token, and the status of a held lock.

// createJob creates the Job of this acquisition, once its holder, fencing token and Job name are
// stored.
func (r *LockedJobReconciler) createJob(ctx context.Context, p *pass) (ctrl.Result, bool, error) {
	lj, lock := p.lj, p.obs.holding
	// A grant of this pass is recorded already (holdAcquired); one re-adopted was recorded by the
	// pass that acquired it, with its Job name. Only a record that lacks them is written here.
	if lj.Status.FencingToken == nil || *lj.Status.FencingToken != lock.Fence() || lj.Status.JobName == "" {
		r.recordGrant(p, lock)
	}
	r.Locks.BindJob(workloadOf(lj))
	// Holder, fencing token and Job name reach the API server before the Job exists, under optimistic
	// locking: an operator that crashes after this write re-adopts the lock and creates the very same
	// Job name, never a second one, and a pass that read a stale object creates nothing.
	if stored := p.before.Status; stored.FencingToken == nil || *stored.FencingToken != lock.Fence() || stored.JobName != lj.Status.JobName {
		if err := r.recordNow(ctx, p); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	job, err := buildJob(lj, lj.Status.JobName, lock.Fence(), p.claim.Holder, r.Scheme)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	ctrl.LoggerFrom(ctx).Info("Creating Job", "Job", klog.KObj(job), "fencingToken", lock.Fence())
	err = r.Create(ctx, job)
	switch {
	case apierrors.IsAlreadyExists(err):
		// A retried pass, or a paused operator: the Job of this acquisition exists. observe adopts it.
		existing, err := r.findJob(ctx, lj, job.Name)
		if err != nil {
			return ctrl.Result{}, false, err
		}
		if existing == nil {
			return ctrl.Result{}, false, fmt.Errorf("job %s exists but cannot be read", job.Name)
		}
		job = existing
	case isRefusal(err):
		r.failJobInvalid(p, err)
		if err := r.releaseAndTell(ctx, p); err != nil && !errors.Is(err, lockbook.ErrNotHeld) {
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{}, false, nil
	case err != nil:
		return ctrl.Result{}, false, fmt.Errorf("create job %s: %w", job.Name, err)
	default:
		msg := fmt.Sprintf("Created Job %s with fencing token %d", job.Name, lock.Fence())
		if p.acquired != "" {
			msg = fmt.Sprintf("%s; created Job %s", p.acquired, job.Name)
		}
		r.event(lj, corev1.EventTypeNormal, batchv1alpha1.ReasonJobCreated, "CreateJob", "%s", msg)
	}
	lj.Status.JobUID = job.UID
	// Until status has the UID, the book tells later passes that the Job was made (observe): one
	// that read the LockedJob from before this pass's record, and finds the Job deleted meanwhile,
	// must take it for a Job gone and wait for its pods (stepJobGone), never create it again (found
	// by the operator model, docs/model.md).
	r.Locks.MarkJobCreated(workloadOf(lj), job.UID)
	p.obs.job, p.obs.jobCreated = job, true
	return ctrl.Result{}, true, nil
}

// recordRunning records a Job that runs under its lock.
func (r *LockedJobReconciler) recordRunning(p *pass) {
	lj := p.lj
	r.recordHeld(p, p.obs.holding)
	msg := fmt.Sprintf("Job %s runs under lock %s with fencing token %d", lj.Status.JobName, lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken))
	reason := batchv1alpha1.ReasonJobRunning
	if p.obs.stuck != "" {
		msg = fmt.Sprintf("Job %s holds lock %s (fencing token %d) but its pod cannot start: %s",
			lj.Status.JobName, lj.Spec.Lock.Name, derefInt64(lj.Status.FencingToken), p.obs.stuck)
		reason = batchv1alpha1.ReasonPodStuck
	}
	tell(lj, running(reason, msg))
}

// recordGrant records a grant: the holder's view of the lock (recordHeld) and the name of the Job
// it runs, which the fence decides once.
func (r *LockedJobReconciler) recordGrant(p *pass, lock *lockbook.Lock) {
	r.recordHeld(p, lock)
	if p.lj.Status.JobName == "" {
		p.lj.Status.JobName = jobName(p.lj, lock.Fence())
	}
}

// recordHeld writes the holder's view of the lock into status: what changes only with a new grant,
// so a pass over a held lock that merely renews writes nothing.
func (r *LockedJobReconciler) recordHeld(p *pass, lock *lockbook.Lock) {
	lj := p.lj
	fence := lock.Fence()
	lj.Status.FencingToken = &fence
	lj.Status.Slot = nil
	if lock.Semaphore() {
		slot := int32(lock.Slot())
		lj.Status.Slot = &slot
	}
	lj.Status.Holder = p.claim.Holder
	// The lock's key, also for a semaphore's slot above 0 (whose own key lockName cannot read back):
	// status.slot says which slot.
	lj.Status.LockKey = r.Locks.RedisKey(lock.Key())
	// Renewal times are not status: Redis has them, and writing them would cost the API server a
	// write per held lock per interval for nothing a user acts on. Objects of earlier versions lose
	// theirs with the next state change.
	lj.Status.RenewedAt, lj.Status.ExpiresAt = nil, nil
	tell(lj, held(lj, fmt.Sprintf("Holding lock %s with fencing token %d%s", lj.Spec.Lock.Name, fence, slotPhrase(lj.Status.Slot))))
}

// slotPhrase says which slot of a semaphore is held, for messages; "" for a plain lock.
func slotPhrase(slot *int32) string {
	if slot == nil {
		return ""
	}
	return fmt.Sprintf(" in slot %d", *slot)
}
