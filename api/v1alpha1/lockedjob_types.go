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

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// LockScope says who shares a lock name.
// +kubebuilder:validation:Enum=Namespace;Cluster
type LockScope string

const (
	// LockScopeNamespace makes the Redis key include the namespace, so tenants cannot block each other.
	LockScopeNamespace LockScope = "Namespace"
	// LockScopeCluster shares the lock across namespaces (and across clusters that share the Redis).
	// The operator allows it only for namespaces it is configured to trust.
	LockScopeCluster LockScope = "Cluster"
)

// DefaultLockTTL is spec.lock.ttl when the object does not set it. The API server fills it in
// (the +kubebuilder:default marker on LockSpec.TTL, which must name the same duration:
// TestCRDDefaultTTLIsDefaultLockTTL); the operator falls back to it for objects stored before the
// CRD had that default.
const DefaultLockTTL = 30 * time.Second

// DefaultLockLostPolicy is spec.lock.onLockLost when the object does not set it; like
// DefaultLockTTL it must match the CRD's default (TestCRDDefaultLockLostPolicy).
const DefaultLockLostPolicy = LockLostSuspend

// LockLostPolicy says what happens to a running Job whose lock was lost.
// +kubebuilder:validation:Enum=Suspend;Delete;Ignore
type LockLostPolicy string

const (
	// LockLostSuspend sets the Job's spec.suspend, which deletes its active pods and keeps the Job for inspection.
	LockLostSuspend LockLostPolicy = "Suspend"
	// LockLostDelete deletes the Job and its pods.
	LockLostDelete LockLostPolicy = "Delete"
	// LockLostIgnore lets the Job run on; the workload must rely on the fencing token.
	LockLostIgnore LockLostPolicy = "Ignore"
)

// DurationPattern matches exactly the strings Go's time.ParseDuration accepts, except values too
// large for an int64 of nanoseconds, which the CEL rules of each field refuse (their duration()
// parses with Go's parser). The API server's own "duration" format also accepts "1d" or "2 weeks",
// which the operator cannot decode: one such object would break the list of every LockedJob.
//
// Every CEL rule calls duration() only on a string that matches it: on one stored before the
// pattern existed, duration() would fail at every update, and such an object could never lose its
// finalizer. The pattern itself is ratcheted (not checked on unchanged values).
const DurationPattern = `^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// LockSpec names the lock a LockedJob runs under and how it is held.
//
// The duration fields carry no "duration" format on purpose: with it, CEL would parse them with the
// API server's lenient parser instead of Go's, and accept what the operator cannot decode.
// +kubebuilder:validation:XValidation:rule="!has(self.renewInterval) || !has(self.ttl) || !self.renewInterval.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || !self.ttl.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self.renewInterval) + duration(self.renewInterval) < duration(self.ttl)",message="spec.lock.renewInterval must be less than half of spec.lock.ttl",fieldPath=".renewInterval"
// +kubebuilder:validation:XValidation:rule="!has(self.renewInterval) || !has(self.ttl) || !self.renewInterval.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || !self.ttl.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || int(duration(self.renewInterval)) * 100 >= int(duration(self.ttl))",message="spec.lock.renewInterval must be at least spec.lock.ttl/100",fieldPath=".renewInterval"
type LockSpec struct {
	// name of the lock. LockedJobs with the same lock name (in the same namespace, or anywhere for
	// scope Cluster) run one at a time.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// scope of the lock name: Namespace (default) or Cluster.
	// +optional
	// +kubebuilder:default=Namespace
	Scope LockScope `json:"scope,omitempty"`

	// ttl is the lease of the lock in Redis, a Go duration such as "30s" or "1m30s". The operator
	// renews it while the Job runs; if the operator stops renewing (crash, partition), the lock frees
	// itself after ttl. Default 30s; from 1s to 24h. Keep it well above the operator's leader-election
	// lease (15s by default): a new leader must re-adopt the locks before they expire.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) >= duration('1s')",message="spec.lock.ttl must be at least 1s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) <= duration('24h')",message="spec.lock.ttl must be at most 24h"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// renewInterval is how often the lease is renewed, a Go duration. Default ttl/3; must be less
	// than ttl/2 and at least 100ms and ttl/100, so that one lock cannot make the renewals it shares
	// a batch with time out.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) >= duration('100ms')",message="spec.lock.renewInterval must be at least 100ms"
	RenewInterval *metav1.Duration `json:"renewInterval,omitempty"`

	// acquireTimeout bounds the wait for the lock, a Go duration. When it passes, the LockedJob fails
	// with reason LockTimeout. Absent means wait forever.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) > duration('0s')",message="spec.lock.acquireTimeout must be positive"
	AcquireTimeout *metav1.Duration `json:"acquireTimeout,omitempty"`

	// priority orders waiters of one lock: higher first, then older first. Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Priority int32 `json:"priority,omitempty"`

	// onLockLost is what happens to the running Job if the lock is lost: Suspend (default), Delete or Ignore.
	// +optional
	// +kubebuilder:default=Suspend
	OnLockLost LockLostPolicy `json:"onLockLost,omitempty"`
}

// JobTemplate is a batch/v1 JobTemplateSpec with the full schema, so the API server refuses a
// wrongly typed field when the LockedJob is created, not the Job API after the lock is acquired (and
// so that one bad object cannot stop the operator from decoding the others).
type JobTemplate struct {
	// metadata holds labels and annotations for the Job.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the Job's spec (batch/v1 JobSpec). The operator sets suspend to false and, unless set
	// here, podReplacementPolicy to Failed. All pods of one Job (parallelism > 1, indexed Jobs)
	// share one fencing token: they run under one holder, and the store protected by the token cannot
	// tell them apart. `kubectl explain job.spec` describes its fields.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.manualSelector) || !self.manualSelector",message="spec.jobTemplate.spec.manualSelector must not be true: the operator finds the Job's pods by the labels the Job API sets",fieldPath=".manualSelector"
	// +kubebuilder:validation:XValidation:rule="!has(self.selector)",message="spec.jobTemplate.spec.selector must not be set: the Job API generates it",fieldPath=".selector"
	// +kubebuilder:validation:XValidation:rule="!has(self.suspend) || !self.suspend",message="spec.jobTemplate.spec.suspend must not be true: a suspended Job would hold the lock while nothing runs",fieldPath=".suspend"
	// +kubebuilder:validation:XValidation:rule="!has(self.managedBy) || self.managedBy == 'kubernetes.io/job-controller'",message="spec.jobTemplate.spec.managedBy must be kubernetes.io/job-controller: the operator waits for pods only the built-in Job controller creates",fieldPath=".managedBy"
	// +kubebuilder:validation:XValidation:rule="has(self.template.spec.restartPolicy) && self.template.spec.restartPolicy in ['Never', 'OnFailure']",message="spec.jobTemplate.spec.template.spec.restartPolicy must be Never or OnFailure",fieldPath=".template.spec.restartPolicy"
	Spec batchv1.JobSpec `json:"spec"`
}

// LockedJobSpec is a Job template plus the lock it must hold to run.
type LockedJobSpec struct {
	// lock names the lock and how it is held. Immutable.
	// +required
	Lock LockSpec `json:"lock"`

	// jobTemplate is the Job to run while holding the lock (a batch/v1 JobTemplateSpec). Immutable.
	// +required
	JobTemplate JobTemplate `json:"jobTemplate"`
}

// LockedJobPhase is a one-word summary of where a LockedJob is.
// +kubebuilder:validation:Enum=Pending;Waiting;Running;Succeeded;Failed;LockLost
type LockedJobPhase string

// Phases.
const (
	// PhasePending: seen, nothing done yet.
	PhasePending LockedJobPhase = "Pending"
	// PhaseWaiting: another holder has the lock; this LockedJob is queued.
	PhaseWaiting LockedJobPhase = "Waiting"
	// PhaseRunning: the lock is held and the Job exists.
	PhaseRunning LockedJobPhase = "Running"
	// PhaseSucceeded: the Job completed and the lock was released.
	PhaseSucceeded LockedJobPhase = "Succeeded"
	// PhaseFailed: the Job failed, or the lock was not acquired within acquireTimeout.
	PhaseFailed LockedJobPhase = "Failed"
	// PhaseLockLost: the lock was lost while the Job ran; spec.lock.onLockLost was applied.
	PhaseLockLost LockedJobPhase = "LockLost"
)

// Condition types. Each is True when the sentence in its comment holds.
const (
	// ConditionLockAcquired: this LockedJob holds its lock now.
	ConditionLockAcquired = "LockAcquired"
	// ConditionJobRunning: the Job exists and has not finished.
	ConditionJobRunning = "JobRunning"
	// ConditionComplete: the Job completed successfully (terminal).
	ConditionComplete = "Complete"
	// ConditionFailed: the Job failed or the lock could not be acquired in time (terminal).
	ConditionFailed = "Failed"
	// ConditionLockLost: the lock was lost while the Job ran (terminal).
	ConditionLockLost = "LockLost"
	// ConditionRedisAvailable: the operator's last Redis operation for this LockedJob succeeded.
	ConditionRedisAvailable = "RedisAvailable"
	// ConditionReady: the LockedJob is where it should be: running under its lock or finished
	// successfully. False with the reason why otherwise (waiting, failed, lost, Redis down).
	ConditionReady = "Ready"
	// ConditionFinished: the LockedJob has reached its end (Succeeded, Failed or LockLost), whatever
	// the outcome; its reason tells which. `kubectl wait --for=condition=Finished` returns on success
	// and failure alike.
	ConditionFinished = "Finished"
	// ConditionPermitsSupported (on a Lock or ClusterLock) is False when the lock declares more
	// permits than the operator's Redis can grant (Redlock admits one holder per lock).
	ConditionPermitsSupported = "PermitsSupported"
)

// Condition and event reasons.
const (
	ReasonWaiting    = "Waiting"
	ReasonAcquired   = "Acquired"
	ReasonReadopted  = "Readopted"
	ReasonJobCreated = "JobCreated"
	ReasonJobRunning = "JobRunning"
	// ReasonPodStuck: the Job holds the lock but its pod cannot start (a missing image, a bad
	// config); the message quotes the kubelet. The lock stays held: the user decides.
	ReasonPodStuck         = "PodStuck"
	ReasonJobComplete      = "JobComplete"
	ReasonJobFailed        = "JobFailed"
	ReasonJobDeleted       = "JobDeleted"
	ReasonJobInvalid       = "JobInvalid"
	ReasonTTLBelowFailover = "TTLBelowFailover"
	// ReasonTTLBelowRoundTrip: spec.lock.ttl leaves too little time for the round trips to Redis
	// the operator measures (a renewal may not be answered before the lease is at risk).
	ReasonTTLBelowRoundTrip = "TTLBelowRoundTrip"
	ReasonLockTimeout       = "LockTimeout"
	ReasonLockLost          = "LockLost"
	ReasonReleased          = "Released"
	ReasonRenewFailed       = "RenewFailed"
	ReasonRedisUnavailable  = "RedisUnavailable"
	ReasonRedisOK           = "RedisOK"
	ReasonScopeNotAllowed   = "ScopeNotAllowed"
	ReasonPending           = "Pending"
	ReasonInProgress        = "InProgress"
	ReasonPermitsSupported  = "PermitsSupported"
	// ReasonPermitsUnsupported: a lock declares more than one permit on Redlock; its LockedJobs wait.
	ReasonPermitsUnsupported = "PermitsUnsupported"
	// ReasonOlderOperators: a lock declares more than one permit, and an operator sharing the Redis
	// announces a lock protocol that would not honour them; the lock admits one holder meanwhile.
	ReasonOlderOperators = "OlderOperators"
)

// Environment variables and annotations that carry the lock to the Job's pods.
const (
	EnvFencingToken = "LOCKEDJOB_FENCING_TOKEN"
	EnvLock         = "LOCKEDJOB_LOCK"
	EnvHolder       = "LOCKEDJOB_HOLDER"
	// EnvSlot is the semaphore slot the Job holds (0..permits-1; 0 for a lock of one permit): a
	// store partitioned by slot fences each partition with LOCKEDJOB_FENCING_TOKEN.
	EnvSlot = "LOCKEDJOB_SLOT"

	AnnotationFencingToken = "batch.lockedjob.dev/fencing-token"
	AnnotationLock         = "batch.lockedjob.dev/lock"
	AnnotationHolder       = "batch.lockedjob.dev/holder"
	AnnotationSlot         = "batch.lockedjob.dev/slot"
	// LabelLockedJob names the LockedJob that owns a Job: its name, or, when the name is longer
	// than a label value may be, a prefix of it and a hash of the whole.
	LabelLockedJob = "batch.lockedjob.dev/lockedjob"
	// AnnotationLockedJob holds the full name of the LockedJob that owns a Job.
	AnnotationLockedJob = "batch.lockedjob.dev/lockedjob"
)

// Finalizers the operator sets.
const (
	// FinalizerReleaseLock keeps a LockedJob until its lock is released and its Job's pods are gone.
	FinalizerReleaseLock = "batch.lockedjob.dev/release-lock"
	// FinalizerPermits keeps a Lock or ClusterLock that declared more than one permit until the
	// operator has set its lock back to one in Redis: the number lives there, and a deleted Lock
	// means one holder.
	FinalizerPermits = "batch.lockedjob.dev/permits"
)

// LockedJobStatus is what the operator observed and did, so `kubectl get lj` and
// `kubectl describe lj` tell the whole story.
// +kubebuilder:validation:MinProperties=1
type LockedJobStatus struct {
	// phase summarises the state: Pending, Waiting, Running, Succeeded, Failed or LockLost.
	// +optional
	Phase LockedJobPhase `json:"phase,omitempty"`

	// lockKey is the Redis key of the lock.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LockKey string `json:"lockKey,omitempty"`

	// holder is this LockedJob's holder identity (cluster/namespace/name/uid) while it holds or held the lock.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Holder string `json:"holder,omitempty"`

	// blockedBy is, while waiting, the holder that has the lock, as read from Redis.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	BlockedBy string `json:"blockedBy,omitempty"`

	// queuePosition is, while waiting, this LockedJob's place among the waiters of the lock (1 = next),
	// as the operator last learnt it (from its own attempt, or from a handoff ahead of it): a waiter
	// of higher priority that arrives later moves it back, which may show only at its next attempt.
	// It is shown for the first 3 places only; further back the message says which bucket the place
	// is in (position >3, >5, >10, >20, >50, ...) and blockedBy is empty, so a waiter deep in a long
	// queue does not rewrite its status with every handoff ahead of it.
	// +optional
	QueuePosition *int32 `json:"queuePosition,omitempty"`

	// fencingToken is the token handed out with the lock; it increases with every new holder.
	// The Job's pods get it as LOCKEDJOB_FENCING_TOKEN.
	// +optional
	FencingToken *int64 `json:"fencingToken,omitempty"`

	// slot is the semaphore slot this LockedJob holds or held, when its lock is a semaphore (a Lock
	// declares more than one permit): the fencing token orders it against the earlier holders of
	// the same slot. The Job's pods get it as LOCKEDJOB_SLOT. Absent for a lock of one holder.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Slot *int32 `json:"slot,omitempty"`

	// acquiredAt is when the lock was acquired.
	// +optional
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`

	// renewedAt is deprecated and no longer written: renewals happen in Redis (the authority) every
	// spec.lock.renewInterval, and a held lock costs the API server no writes. A failed renewal
	// shows as a state change (LockLost). Kept so objects written by earlier versions still decode.
	// +optional
	RenewedAt *metav1.Time `json:"renewedAt,omitempty"`

	// expiresAt is deprecated and no longer written, for the same reason as renewedAt: a held lock
	// expires spec.lock.ttl after its last renewal, and the keeper renews it long before.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// waitingSince is when this LockedJob started waiting for the lock.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// releasedAt is when the lock was released.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`

	// jobName is the name of the Job created under the lock. It is recorded before the Job is
	// created, so it names the Job of this acquisition even after a crash.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	JobName string `json:"jobName,omitempty"`

	// jobUID is the UID of the Job once it was created. A Job that is gone while the LockedJob has
	// not finished was deleted out of band: it is never created again.
	// +optional
	JobUID types.UID `json:"jobUID,omitempty"`

	// message explains the phase in a sentence.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: LockAcquired, JobRunning, Complete, Failed, LockLost, RedisAvailable, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lj,categories=all;lockedjob
// The default columns fit a 120-column terminal for names as long as the demo's; the holder, who
// blocks, the lease and the rest are in -o wide.
// +kubebuilder:printcolumn:name="Lock",type=string,JSONPath=`.spec.lock.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`,priority=10
// +kubebuilder:printcolumn:name="Blocked-By",type=string,JSONPath=`.status.blockedBy`,priority=10
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fencingToken`
// +kubebuilder:printcolumn:name="Slot",type=integer,JSONPath=`.status.slot`,priority=10
// A string, not a date: kubectl prints a future date as <invalid>.
// +kubebuilder:printcolumn:name="TTL",type=string,JSONPath=`.spec.lock.ttl`,priority=10,description="Lease length; the operator renews it every renewInterval"
// +kubebuilder:printcolumn:name="Acquired",type=date,JSONPath=`.status.acquiredAt`,priority=10,description="When the current holder acquired the lock"
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.status.jobName`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`,priority=10
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.lock.priority`,priority=10
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec.lock == oldSelf.spec.lock",message="spec.lock is immutable: delete and recreate the LockedJob to change it"
// +kubebuilder:validation:XValidation:rule="self.spec.jobTemplate == oldSelf.spec.jobTemplate",message="spec.jobTemplate is immutable: delete and recreate the LockedJob to change it"

// LockedJob runs a Job while holding a Redis lock: at most one Job per lock runs at a time,
// and its pods get a fencing token.
type LockedJob struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the lock and the Job template.
	// +required
	Spec LockedJobSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status LockedJobStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// LockedJobList contains a list of LockedJob.
type LockedJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []LockedJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &LockedJob{}, &LockedJobList{})
		return nil
	})
}
