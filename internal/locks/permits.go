package locks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Semaphores (docs/design.md, "Semaphores and the per-lock view"): a lock admits as many holders
// as the Lock (scope Namespace) or ClusterLock (scope Cluster) named after it declares in
// spec.permits; a lock nobody declares admits one. Redis keeps the number the view controller
// wrote, its one writer (settlePermits in controllers/lockview/lockview_settle.go), and the lock library
// obeys what Redis keeps, also for a caller that does not pass it; the number an acquisition passes
// can only lower it.

// Declaration returns an empty Lock or ClusterLock of the kind that declares c's lock, and the
// name it has, to read it into.
func Declaration(c Claimant) (client.Object, types.NamespacedName) {
	if c.Lock.ScopeOrDefault() == batchv1alpha1.LockScopeCluster {
		return &batchv1alpha1.ClusterLock{}, types.NamespacedName{Name: c.Lock.Name}
	}
	return &batchv1alpha1.Lock{}, types.NamespacedName{Namespace: c.Namespace, Name: c.Lock.Name}
}

// Permits reads spec.permits of a Lock or ClusterLock as Admits does.
func Permits(obj client.Object) int {
	var n int32
	switch l := obj.(type) {
	case *batchv1alpha1.Lock:
		n = l.Spec.Permits
	case *batchv1alpha1.ClusterLock:
		n = l.Spec.Permits
	}
	return Admits(n)
}

// Admits is how many may hold a lock at once whose declaration says spec.permits is n: an object
// stored without spec (the default applies only when spec is present) admits one.
func Admits(n int32) int {
	return max(int(n), 1)
}

// PermitReader reads how many may hold a lock at once, for the reconcilers that acquire or look.
type PermitReader struct {
	// Reader reads the declaring Lock or ClusterLock (for the operator, the manager's cache).
	Reader client.Reader
	// Served says the Lock and ClusterLock CRDs are installed.
	Served bool
}

// Of returns how many may hold c's lock at once: the declaring object's spec.permits, or 1 when
// nothing declares it, the declaring object is being deleted, or the Lock kinds are not installed.
func (p PermitReader) Of(ctx context.Context, c Claimant) (int, error) {
	if !p.Served {
		return 1, nil
	}
	obj, name := Declaration(c)
	err := p.Reader.Get(ctx, name, obj)
	if apierrors.IsNotFound(err) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get the permits of lock %s: %w", c.Lock.Name, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return 1, nil // being deleted: its lock goes back to one permit (the view controller's retire)
	}
	return Permits(obj), nil
}

// RedlockRefusal says why a claimant of lock waits while it declares permits > 1 and the
// operator's Redis is Redlock, which admits one holder per lock: each node would choose a slot on
// its own, and no slot might reach a majority. LockedJobs and guarded Jobs say it alike.
func RedlockRefusal(lock string, permits int) string {
	return fmt.Sprintf("Lock %s declares %d permits, and the operator's Redis is Redlock, which admits one holder per lock: waiting until the Lock declares 1", lock, permits)
}
