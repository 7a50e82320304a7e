package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestCRDLockNameIsLockNamePattern: a guarded Job's lock label and a LockedJob's spec.lock.name
// name the same locks, so they are checked by one rule.
func TestCRDLockNameIsLockNamePattern(t *testing.T) {
	if got := crdLockSchema(t).Properties["name"].Pattern; got != LockNamePattern {
		t.Fatalf("spec.lock.name has pattern %q in the CRD, LockNamePattern is %q", got, LockNamePattern)
	}
}

// TestGuardKeysAreQualifiedNames: the guard's label and annotations are keys the API server
// accepts, in the group's own prefix, so no other tool's key can collide with them.
func TestGuardKeysAreQualifiedNames(t *testing.T) {
	for _, k := range []string{LabelGuardLock, AnnotationGuardScope, AnnotationGuardPriority, AnnotationGuardTTL, AnnotationGuardOnLockLost,
		AnnotationGuard, AnnotationGuardLockKey} {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%q: %v", k, errs)
		}
		if !strings.HasPrefix(k, GroupVersion.Group+"/") {
			t.Errorf("%q is not in the group %s", k, GroupVersion.Group)
		}
	}
}
