/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// A guarded Job is a plain batch/v1 Job, made by a user, a CronJob, a Helm hook or GitOps, that
// asks to run under a lock by one label. The admission policies of config/guard create it
// suspended, with the lock's environment variables (EnvFencingToken, EnvLock, EnvHolder, EnvSlot)
// read from its pod template's annotations (AnnotationFencingToken, AnnotationLock,
// AnnotationHolder, AnnotationSlot); the operator sets those and unsuspends the Job once it holds
// the lock for it. The optional annotations stand for the fields of a LockedJob's spec.lock and
// take the same values, as strings.
const (
	// LabelGuardLock on a Job names the lock it must hold to run (a lock name, as spec.lock.name).
	// A label, not an annotation, so the admission policies select guarded Jobs without running
	// CEL on every Job of the cluster.
	LabelGuardLock = "batch.lockedjob.dev/lock"
	// LabelGuardedJobPod marks the pods of a guarded Job whose lock the operator holds, so that each
	// reconciler's cache of them is selected on the API server and the lock can go at the pod's
	// outcome. Its value says who let the Job run: GuardedJobPodUnsuspended (the operator adds the
	// label to the pod template in its unsuspend write) or GuardedJobPodKueue (Kueue writes it from
	// the podSetUpdates of the operator's AdmissionCheck). Not LabelGuardLock, which would make each
	// pod ask for the lock its Job holds.
	LabelGuardedJobPod = "batch.lockedjob.dev/guarded-job"
	// GuardedJobPodUnsuspended is LabelGuardedJobPod's value on the pods of a guarded Job the
	// operator unsuspended.
	GuardedJobPodUnsuspended = "true"
	// GuardedJobPodKueue is LabelGuardedJobPod's value on the pods of a Job Kueue admitted under the
	// operator's AdmissionCheck.
	GuardedJobPodKueue = "kueue"

	// SchedulingGateGuard is the scheduling gate the admission policy adds to a guarded Pod (a Pod
	// labelled LabelGuardLock that no batch/v1 Job controls) at creation, and the operator removes, in the write that gives
	// the Pod its fence, once it holds the lock.
	SchedulingGateGuard = "batch.lockedjob.dev/lock"

	// AnnotationGuardScope is the lock's scope, as spec.lock.scope: Namespace (default) or Cluster.
	AnnotationGuardScope = "batch.lockedjob.dev/scope"
	// AnnotationGuardPriority orders the waiters of one lock, as spec.lock.priority: a decimal
	// integer from -1000 to 1000 (default 0).
	AnnotationGuardPriority = "batch.lockedjob.dev/priority"
	// AnnotationGuardTTL is the lease, as spec.lock.ttl: a Go duration from 1s to 24h (default
	// DefaultLockTTL).
	AnnotationGuardTTL = "batch.lockedjob.dev/ttl"
	// AnnotationGuardOnLockLost is what happens to the Job if its lock is lost, as
	// spec.lock.onLockLost: a LockLostPolicy (default DefaultLockLostPolicy).
	AnnotationGuardOnLockLost = "batch.lockedjob.dev/on-lock-lost"
)

// What the operator records on a guarded Job, in the Job's own annotations: a guarded Job has no
// object of ours, so these hold what a LockedJob's status holds. The fence, holder and slot are
// AnnotationFencingToken, AnnotationHolder and AnnotationSlot (the slot only for a semaphore), as
// on a LockedJob's Job; the pod template carries those and AnnotationLock to the pods.
const (
	// AnnotationGuard is where the guard stands (a GuardState).
	AnnotationGuard = "batch.lockedjob.dev/guard"
	// AnnotationGuardLockKey is the Redis key of the lock the Job holds, as a LockedJob's
	// status.lockKey.
	AnnotationGuardLockKey = "batch.lockedjob.dev/lock-key"
)

// GuardState is the value of AnnotationGuard.
type GuardState string

const (
	// GuardHeld: the operator holds the lock for the Job and unsuspended it.
	GuardHeld GuardState = "Held"
	// GuardReleased: the Job ended and the lock was released.
	GuardReleased GuardState = "Released"
	// GuardLost: the lock was lost while the Job held it; its on-lock-lost policy was applied.
	GuardLost GuardState = "Lost"
	// GuardUnguarded: the Job runs, or ran, without the operator holding its lock (it was not
	// created suspended by the admission gate, or someone else unsuspended it): it is never a holder.
	GuardUnguarded GuardState = "Unguarded"
	// GuardScopeNotAllowed: Cluster scope from a namespace the operator does not trust; the Job stays
	// suspended (a Pod, gated).
	GuardScopeNotAllowed GuardState = "ScopeNotAllowed"
)

// Event reasons of guarded Jobs beside those they share with LockedJobs (ReasonAcquired,
// ReasonReadopted, ReasonJobComplete, ReasonJobFailed, ReasonLockLost, ReasonScopeNotAllowed).
const (
	// ReasonUnguarded: a labelled Job runs without the operator holding its lock.
	ReasonUnguarded = "Unguarded"
	// ReasonGuardInvalid: a labelled Job's lock label or annotations do not parse.
	ReasonGuardInvalid = "GuardInvalid"
)

// LockNamePattern is the rule of a lock's name: spec.lock.name's pattern in the CRD (the marker
// on LockSpec.Name must spell the same: TestCRDLockNameIsLockNamePattern), and the rule the
// admission policy applies to LabelGuardLock.
const LockNamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
