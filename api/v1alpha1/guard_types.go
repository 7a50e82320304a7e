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

// LockNamePattern is the rule of a lock's name: spec.lock.name's pattern in the CRD (the marker
// on LockSpec.Name must spell the same: TestCRDLockNameIsLockNamePattern), and the rule the
// admission policy applies to LabelGuardLock.
const LockNamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
