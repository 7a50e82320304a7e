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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// LockViewSpec is what a user declares about a lock: how many may hold it at once. Declaring a Lock
// (or ClusterLock) also asks the operator to keep the lock's view in status (docs/design.md,
// "Semaphores and the per-lock view").
type LockViewSpec struct {
	// permits is how many LockedJobs may hold the lock at once: 1 is a mutex, more make it a
	// semaphore, whose holders each get their own slot (LOCKEDJOB_SLOT, 0..permits-1) with fencing
	// tokens that rise within the slot. Raising it lets waiters in at once; lowering it keeps the
	// holders above the new number until they release, and nobody acquires until fewer than the new
	// number hold the lock. Deleting the Lock sets the lock back to 1. Not on Redlock (see the
	// PermitsSupported condition).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Permits int32 `json:"permits,omitempty"`
}

// LockHolder is one holder of a lock as Redis shows it. It never carries the holder's token.
type LockHolder struct {
	// holder is the holder's name: cluster ID, namespace, LockedJob name (job:<name> for a guarded
	// Job) and a UID prefix.
	// +kubebuilder:validation:MaxLength=512
	Holder string `json:"holder"`

	// lockedJob is the holding LockedJob's name, when it lives in this cluster and in the Lock's
	// namespace (for a ClusterLock: "namespace/name").
	// +optional
	// +kubebuilder:validation:MaxLength=317
	LockedJob string `json:"lockedJob,omitempty"`

	// job is the holding guarded Job's name (a batch/v1 Job labelled batch.lockedjob.dev/lock),
	// when it lives in this cluster and in the Lock's namespace (for a ClusterLock:
	// "namespace/name").
	// +optional
	// +kubebuilder:validation:MaxLength=317
	Job string `json:"job,omitempty"`

	// slot is the semaphore slot the holder has (0 for a lock of one permit).
	// +optional
	Slot int32 `json:"slot"`

	// fencingToken is the token the holder's Job runs under; it orders the holder against the
	// earlier holders of the same slot.
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// acquiredAt is when the holder acquired the lock, when its LockedJob is in this cluster (a
	// guarded Job records no acquisition time).
	// +optional
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`
}

// LockHandoff is a lock passing from one holder to the next, as the operator saw it between two
// reads: holders it saw in between (the view is written at most every few seconds) are not named.
type LockHandoff struct {
	// from is the holder that left: its LockedJob (name, or "namespace/name" for a ClusterLock)
	// or its guarded Job ("job/name", "namespace/job/name") when it is in this cluster, else its
	// holder name.
	// +kubebuilder:validation:MaxLength=512
	From string `json:"from"`

	// to is the holder that came, named as from is.
	// +kubebuilder:validation:MaxLength=512
	To string `json:"to"`

	// at is when the new holder acquired the lock (when the operator read it, for a holder of
	// another cluster).
	At metav1.Time `json:"at"`
}

// LockViewStatus is a lock as Redis holds it, kept by the operator from Redis: written only when
// it changes, and at most once per few seconds per lock.
type LockViewStatus struct {
	// lockKey is the lock's Redis key.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LockKey string `json:"lockKey,omitempty"`

	// holders are the LockedJobs and guarded Jobs that hold the lock now, by slot.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Holders []LockHolder `json:"holders,omitempty"`

	// inUse is how many hold the lock now, of permits.
	// +optional
	InUse int32 `json:"inUse"`

	// permits is how many Redis admits to hold the lock at once now: spec.permits, or 1 while the
	// PermitsSupported condition is False (it says why).
	// +optional
	Permits int32 `json:"permits,omitempty"`

	// waiting is how many waiters stand live in the lock's queue (in every cluster that shares the
	// Redis); absent on Redlock, whose nodes keep separate queues.
	// +optional
	Waiting *int32 `json:"waiting,omitempty"`

	// head is the waiter at the head of the queue: the next holder.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Head string `json:"head,omitempty"`

	// lastFencingToken is the last fencing token handed out for this lock.
	// +optional
	LastFencingToken int64 `json:"lastFencingToken,omitempty"`

	// lastHandoff is the last time the operator saw the lock pass from one holder to another.
	// +optional
	LastHandoff *LockHandoff `json:"lastHandoff,omitempty"`

	// observedAt is when the operator last read the lock from Redis and found it changed.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: RedisAvailable, and PermitsSupported (False when spec.permits is more than 1 and
	// the operator's Redis is Redlock, which admits one holder per lock).
	// +listType=map
	// +listMapKey=type
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=lockedjob
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holders[0].lockedJob`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.holders[0].fencingToken`
// +kubebuilder:printcolumn:name="In-Use",type=integer,JSONPath=`.status.inUse`
// +kubebuilder:printcolumn:name="Permits",type=integer,JSONPath=`.status.permits`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.waiting`
// +kubebuilder:printcolumn:name="Last-Handoff",type=date,JSONPath=`.status.lastHandoff.at`
// +kubebuilder:printcolumn:name="Head",type=string,JSONPath=`.status.head`,priority=10
// +kubebuilder:printcolumn:name="Holder-Name",type=string,JSONPath=`.status.holders[0].holder`,priority=10
// +kubebuilder:printcolumn:name="Holder-Job",type=string,JSONPath=`.status.holders[0].job`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Lock shows a lock of scope Namespace, named like the lock, in the namespace of its LockedJobs:
// who holds it, under which fencing token, and who waits.
type Lock struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is standard object metadata; its name is the lock's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is what is declared about the lock.
	// +optional
	Spec LockViewSpec `json:"spec,omitzero"`

	// status is the lock as Redis holds it.
	// +optional
	Status LockViewStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// LockList contains a list of Lock.
type LockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []Lock `json:"items"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=lockedjob
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holders[0].lockedJob`
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.holders[0].fencingToken`
// +kubebuilder:printcolumn:name="In-Use",type=integer,JSONPath=`.status.inUse`
// +kubebuilder:printcolumn:name="Permits",type=integer,JSONPath=`.status.permits`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.waiting`
// +kubebuilder:printcolumn:name="Last-Handoff",type=date,JSONPath=`.status.lastHandoff.at`
// +kubebuilder:printcolumn:name="Head",type=string,JSONPath=`.status.head`,priority=10
// +kubebuilder:printcolumn:name="Holder-Name",type=string,JSONPath=`.status.holders[0].holder`,priority=10
// +kubebuilder:printcolumn:name="Holder-Job",type=string,JSONPath=`.status.holders[0].job`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterLock shows a lock of scope Cluster, named like the lock: who holds it (in any namespace,
// and in any cluster that shares the Redis), under which fencing token, and who waits.
type ClusterLock struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is standard object metadata; its name is the lock's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is what is declared about the lock.
	// +optional
	Spec LockViewSpec `json:"spec,omitzero"`

	// status is the lock as Redis holds it.
	// +optional
	Status LockViewStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// ClusterLockList contains a list of ClusterLock.
type ClusterLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []ClusterLock `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &Lock{}, &LockList{}, &ClusterLock{}, &ClusterLockList{})
		return nil
	})
}
