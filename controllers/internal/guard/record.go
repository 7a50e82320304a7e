// Package guard is what the reconcilers of guarded Jobs and guarded Pods share: the record each
// keeps in its object's own annotations (there is no object of ours), read back the same way for
// both kinds, and the small rules of their steps (the lease, the waiters' backoff, the slot in a
// message). The reconcilers act on their own kind; nothing here writes.
package guard

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Finalizer is ours on a held Job or Pod: added by the write that lets it run under the lock,
// removed by the release.
const Finalizer = batchv1alpha1.FinalizerReleaseLock

// RecordedLock is the lock an object's record says it holds.
type RecordedLock struct {
	Scope batchv1alpha1.LockScope
	Name  string
	Key   string // the Redis key recorded
}

// HeldLock is the lock an object was let run under, from its record: our finalizer (added by the
// write that let it run, removed by the release) and the Redis key recorded beside it. The key
// counts only if it is one the object could have named itself: a lock of this cluster and, for
// Namespace scope, of the object's own namespace, so an edited record never points the operator at
// another tenant's lock.
func HeldLock(obj client.Object, id locks.Identity, libraryKey func(string) (string, bool)) (RecordedLock, bool) {
	recorded := obj.GetAnnotations()[batchv1alpha1.AnnotationGuardLockKey]
	if !controllerutil.ContainsFinalizer(obj, Finalizer) || recorded == "" {
		return RecordedLock{}, false
	}
	key, ok := libraryKey(recorded)
	if !ok {
		return RecordedLock{}, false
	}
	scope, namespace, name, ok := id.Parse(key)
	if !ok || (scope == batchv1alpha1.LockScopeNamespace && namespace != obj.GetNamespace()) {
		return RecordedLock{}, false
	}
	return RecordedLock{Scope: scope, Name: name, Key: recorded}, true
}

// Over makes the claimant of kind of a held object: it holds the recorded lock until the lock is
// released, whatever its label and annotations say now. The admission gate refuses a change of
// either, but an object edited while the gate was not in force must still release, re-adopt and
// lose the lock it holds, not one it names now; terms that no longer parse take their defaults.
// drift says what differs, for the user; "" when nothing does.
func (h RecordedLock) Over(kind locks.Kind, obj metav1.Object, parsed locks.Claimant, parseErr error) (c locks.Claimant, drift string) {
	if parseErr != nil {
		c = locks.Claimant{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), Created: obj.GetCreationTimestamp().Time}
		drift = fmt.Sprintf("The %s's lock cannot be read (%v): it keeps lock %s, which it holds, on the default terms until it ends", kind, parseErr, h.Name)
	} else {
		c = parsed
		if c.Lock.Name != h.Name || c.Lock.Scope != h.Scope {
			drift = fmt.Sprintf("The %s now names lock %s (scope %s): it keeps lock %s (scope %s), which it holds, until it ends",
				kind, c.Lock.Name, c.Lock.Scope, h.Name, h.Scope)
		}
	}
	c.Lock.Name, c.Lock.Scope = h.Name, h.Scope
	return c, drift
}

// RecordedFence is the fence the object's record carries; 0, which no acquisition gets, if none (or
// not a number), so a re-adoption never takes it for the lock it finds.
func RecordedFence(obj metav1.Object) int64 {
	fence, err := strconv.ParseInt(obj.GetAnnotations()[batchv1alpha1.AnnotationFencingToken], 10, 64)
	if err != nil {
		return 0
	}
	return fence
}

// RecordedSlot is the semaphore slot the object's record carries (nil: a plain lock, slot 0).
func RecordedSlot(obj metav1.Object) *int32 {
	v, ok := obj.GetAnnotations()[batchv1alpha1.AnnotationSlot]
	if !ok {
		return nil
	}
	slot, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return nil
	}
	s := int32(slot)
	return &s
}

// Continues reports whether lock continues the acquisition a record names: found held with our
// token (not granted afresh), under the recorded fence, in the recorded slot.
func Continues(lock *lockbook.Lock, fence int64, slot *int32) bool {
	recorded := 0
	if slot != nil {
		recorded = int(*slot)
	}
	return lock.Readopted() && lock.Fence() == fence && lock.Slot() == recorded
}

// TTLOf is the lease of the claimant's lock.
func TTLOf(c locks.Claimant) time.Duration {
	if c.Lock.TTL == nil {
		return batchv1alpha1.DefaultLockTTL
	}
	return c.Lock.TTL.Duration
}

// SlotPhrase names a semaphore's slot in a message; nothing for a plain lock.
func SlotPhrase(lock *lockbook.Lock) string {
	if !lock.Semaphore() {
		return ""
	}
	return fmt.Sprintf(" (slot %d)", lock.Slot())
}

// UnguardedNote is the Event note of an object marked Unguarded, for every guarded kind: which
// lock it names, why it runs without it (why follows "but"), and what that costs.
func UnguardedNote(kind locks.Kind, lock, why string) string {
	return fmt.Sprintf("The %s carries lock %s but %s. No fencing token covers it, and it may overlap the lock's holders", kind, lock, why)
}

// Jitter spreads passes that were scheduled together: d/2 up to d.
func Jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// Annotate sets the object's annotations from kv (key, value, ...).
func Annotate(obj metav1.Object, kv ...string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	obj.SetAnnotations(a)
}
