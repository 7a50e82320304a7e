package kueuecheck

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/internal/guard"
)

// Recording: the hold goes into the Job's annotations and our check's state into the Workload's
// status, each by one optimistic merge patch, so a pass that read a stale object writes nothing.

// patchJob applies change to the pass's Job and writes the difference, by an optimistic merge
// patch: a pass that read a stale Job writes nothing.
func (r *KueueCheckReconciler) patchJob(ctx context.Context, p *pass, what string, change func(*batchv1.Job)) error {
	base := p.job.DeepCopy()
	change(p.job)
	if err := r.Client.Patch(ctx, p.job, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("%s: patch job %s: %w", what, p.job.Name, err)
	}
	return nil
}

// recordGuard writes the guard state, and drops the finalizer if asked.
func (r *KueueCheckReconciler) recordGuard(ctx context.Context, p *pass, g batchv1alpha1.GuardState, dropFinalizer bool) error {
	err := r.patchJob(ctx, p, "record "+string(g), func(job *batchv1.Job) {
		guard.Annotate(job, batchv1alpha1.AnnotationGuard, string(g))
		if dropFinalizer {
			controllerutil.RemoveFinalizer(job, finalizer)
		}
	})
	if err != nil {
		return err
	}
	p.obs.guard, p.obs.held = g, false
	if dropFinalizer {
		p.obs.hasFinalizer = false
	}
	return nil
}

// tell says in our Pending check's message why it stays Pending, where Kueue's users look
// (kubectl describe workload); a message already there is not written again.
func (r *KueueCheckReconciler) tell(ctx context.Context, p *pass, msg string) error {
	if p.workload == nil || p.check == "" || messageOf(p.workload, p.check) == msg {
		return nil
	}
	return r.setCheck(ctx, p.workload, p.check, statePending, msg, nil)
}

// setCheck writes the state of our check on the Workload, keeping the others, by an optimistic
// merge patch of its status: a pass that read a stale Workload writes nothing.
func (r *KueueCheckReconciler) setCheck(ctx context.Context, wl *unstructured.Unstructured, check, state, msg string, updates []any) error {
	base := wl.DeepCopy()
	states := checkStates(wl)
	list := make([]any, 0, len(states))
	for _, st := range states {
		if st["name"] == check {
			if st["state"] != state {
				st["lastTransitionTime"] = metav1.Now().UTC().Format(time.RFC3339)
			}
			st["state"], st["message"] = state, msg
			if updates != nil {
				st["podSetUpdates"] = updates
			} else {
				delete(st, "podSetUpdates")
			}
		}
		list = append(list, st)
	}
	if err := unstructured.SetNestedSlice(wl.Object, list, "status", "admissionChecks"); err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, wl, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("set admission check %s of workload %s %s: %w", check, wl.GetName(), state, err)
	}
	return nil
}
