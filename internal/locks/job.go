package locks

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The bounds of a guarded Job's annotations: those of spec.lock (the CRD's markers), which the
// admission policy of config/guard applies too.
const (
	maxLockName              = 253
	minPriority, maxPriority = -1000, 1000
	minTTL, maxTTL           = time.Second, 24 * time.Hour
)

var lockNameRe = regexp.MustCompile(batchv1alpha1.LockNamePattern)

// GuardedJobs selects the guarded Jobs: those that ask for a lock by LabelGuardLock and are not a
// LockedJob's (LabelLockedJob: that Job runs under its LockedJob's lock; the admission gate refuses
// both labels on one Job anyway). The cache of guarded Jobs selects by it on the API server, Jobs
// that Kueue admits included; IsGuardedJob and IsKueueGuardedJob split it, for a Job in hand,
// between the reconciler that unsuspends a Job and the AdmissionCheck that lets Kueue do it.
func GuardedJobs() labels.Selector {
	guard, err := labels.NewRequirement(batchv1alpha1.LabelGuardLock, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key that is a valid label key
	}
	own, err := labels.NewRequirement(batchv1alpha1.LabelLockedJob, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*guard, *own)
}

// LabelKueueQueue puts a Job in a Kueue LocalQueue. A labelled Job that carries it too is Kueue's to
// suspend and unsuspend: the operator answers for its lock as an AdmissionCheck of Kueue
// (controllers/kueuecheck), never by unsuspending it.
const LabelKueueQueue = "kueue.x-k8s.io/queue-name"

// IsGuardedJob reports whether job is one GuardedJobs selects and Kueue does not admit: the
// guarded-Job reconciler's, which suspends and unsuspends it.
func IsGuardedJob(job *batchv1.Job) bool { return isLabelledJob(job) && !queuedInKueue(job) }

// IsKueueGuardedJob reports whether job is one GuardedJobs selects that Kueue admits (it carries
// LabelKueueQueue): the AdmissionCheck's (controllers/kueuecheck). Kueue alone suspends and
// unsuspends it. A Job is one or the other, never both.
func IsKueueGuardedJob(job *batchv1.Job) bool { return isLabelledJob(job) && queuedInKueue(job) }

func isLabelledJob(job *batchv1.Job) bool { return GuardedJobs().Matches(labels.Set(job.Labels)) }

func queuedInKueue(job *batchv1.Job) bool {
	_, ok := job.Labels[LabelKueueQueue]
	return ok
}

// ClaimantOfJob is the Claimant of a guarded Job: the lock its LabelGuardLock names, under the
// terms of its optional annotations (api/v1alpha1/guard_types.go). The admission policy refuses a
// Job whose label or annotations do not parse, but a Job let in while the policy was not in force
// (or edited by someone it does not bind) may carry anything, so each is checked here again, and
// the error names the label or annotation at fault.
func ClaimantOfJob(job *batchv1.Job) (Claimant, error) { return claimantOfLabelled(KindJob, job) }

// claimantOfLabelled is the Claimant of kind of an object that asks for a lock by LabelGuardLock and
// the guard annotations: a guarded Job or Pod, one rule for both.
func claimantOfLabelled(kind Kind, obj metav1.Object) (Claimant, error) {
	name, ok := obj.GetLabels()[batchv1alpha1.LabelGuardLock]
	if !ok {
		return Claimant{}, fmt.Errorf("label %s: not set", batchv1alpha1.LabelGuardLock)
	}
	if len(name) > maxLockName || !lockNameRe.MatchString(name) {
		return Claimant{}, fmt.Errorf("label %s: %q is not a lock name (%s)", batchv1alpha1.LabelGuardLock, name, batchv1alpha1.LockNamePattern)
	}
	lock := batchv1alpha1.LockSpec{Name: name, Scope: batchv1alpha1.LockScopeNamespace}
	for _, parse := range []func(*batchv1alpha1.LockSpec, map[string]string) error{parseScope, parsePriority, parseTTL, parseOnLockLost} {
		if err := parse(&lock, obj.GetAnnotations()); err != nil {
			return Claimant{}, err
		}
	}
	return Claimant{
		Kind:      kind,
		Namespace: obj.GetNamespace(),
		Name:      obj.GetName(),
		UID:       obj.GetUID(),
		Created:   obj.GetCreationTimestamp().Time,
		Lock:      lock,
	}, nil
}

func parseScope(lock *batchv1alpha1.LockSpec, annotations map[string]string) error {
	v, ok := annotations[batchv1alpha1.AnnotationGuardScope]
	if !ok {
		return nil
	}
	switch scope := batchv1alpha1.LockScope(v); scope {
	case batchv1alpha1.LockScopeNamespace, batchv1alpha1.LockScopeCluster:
		lock.Scope = scope
		return nil
	}
	return fmt.Errorf("annotation %s: %q is neither %s nor %s", batchv1alpha1.AnnotationGuardScope, v,
		batchv1alpha1.LockScopeNamespace, batchv1alpha1.LockScopeCluster)
}

func parsePriority(lock *batchv1alpha1.LockSpec, annotations map[string]string) error {
	v, ok := annotations[batchv1alpha1.AnnotationGuardPriority]
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < minPriority || n > maxPriority {
		return fmt.Errorf("annotation %s: %q is not an integer from %d to %d", batchv1alpha1.AnnotationGuardPriority, v, minPriority, maxPriority)
	}
	lock.Priority = int32(n)
	return nil
}

func parseTTL(lock *batchv1alpha1.LockSpec, annotations map[string]string) error {
	v, ok := annotations[batchv1alpha1.AnnotationGuardTTL]
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < minTTL || d > maxTTL {
		return fmt.Errorf("annotation %s: %q is not a duration from %s to %s", batchv1alpha1.AnnotationGuardTTL, v, minTTL, maxTTL)
	}
	lock.TTL = &metav1.Duration{Duration: d}
	return nil
}

func parseOnLockLost(lock *batchv1alpha1.LockSpec, annotations map[string]string) error {
	v, ok := annotations[batchv1alpha1.AnnotationGuardOnLockLost]
	if !ok {
		return nil
	}
	switch policy := batchv1alpha1.LockLostPolicy(v); policy {
	case batchv1alpha1.LockLostSuspend, batchv1alpha1.LockLostDelete, batchv1alpha1.LockLostIgnore:
		lock.OnLockLost = policy
		return nil
	}
	return fmt.Errorf("annotation %s: %q is not %s, %s or %s", batchv1alpha1.AnnotationGuardOnLockLost, v,
		batchv1alpha1.LockLostSuspend, batchv1alpha1.LockLostDelete, batchv1alpha1.LockLostIgnore)
}
