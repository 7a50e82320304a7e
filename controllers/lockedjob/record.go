package lockedjob

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Recording: the status writes of a pass.

// record is the one status write at the end of a pass, with optimistic locking: a pass that read a
// stale LockedJob must not overwrite what a later pass recorded. observedGeneration moves only when
// the pass succeeded; nothing is written when nothing changed.
// raced reports a write that lost to a newer version of the object.
func (r *LockedJobReconciler) record(ctx context.Context, p *pass, reterr error) (raced bool, err error) {
	if !p.obs.hasFinalizer && !p.obs.deleting {
		return false, nil // the finalizer pass writes metadata only
	}
	if p.obs.deleting && !controllerutil.ContainsFinalizer(p.lj, finalizer) {
		return false, nil // this pass let the object go: there is nobody left to read its status
	}
	if reterr == nil {
		p.lj.Status.ObservedGeneration = p.lj.Generation
	}
	summarize(p.lj)
	if equality.Semantic.DeepEqual(p.before.Status, p.lj.Status) {
		return false, nil
	}
	err = r.Status().Patch(ctx, p.lj, client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		return true, nil
	}
	return false, err
}

// recordNow writes status at once, with optimistic locking, where a pass must not go on before it
// is stored (the fence before the Job is created; the outcome before the finalizer is removed), and
// moves the patch base, so the final write carries only what changes after it. A conflict means
// another pass or writer got there first: nothing goes on from a stale view.
func (r *LockedJobReconciler) recordNow(ctx context.Context, p *pass) error {
	p.lj.Status.ObservedGeneration = p.lj.Generation
	summarize(p.lj)
	if err := r.Status().Patch(ctx, p.lj, client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record status: %w", err)
	}
	p.before = p.lj.DeepCopy()
	return nil
}
