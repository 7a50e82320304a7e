package locks

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Kind is the Kubernetes kind of a workload that asks for a lock.
type Kind string

const (
	// KindLockedJob is a LockedJob: the operator creates its Job under the lock.
	KindLockedJob Kind = "LockedJob"
	// KindJob is a batch/v1 Job labelled for a lock: admitted suspended, unsuspended under it.
	KindJob Kind = "Job"
	// KindPod is a Pod labelled for a lock and not controlled by a Job (IsGuardedPod): admitted
	// behind a scheduling gate, ungated under it.
	KindPod Kind = "Pod"
)

// Claimant is a workload that asks for a lock, of any kind: what Identity derives the lock's key,
// the holder name, the token and the place in the queue from. It is a value, so the rules of
// Identity are written once for every kind, and a reconciler builds it from its object (ClaimantOf
// for a LockedJob).
//
// The holder name tells the kinds apart, so holders of different kinds never collide and
// ParseHolder knows which kind holds a lock:
//
//	LockedJob  <cluster>/<namespace>/<name>/<uid8>
//	Job        <cluster>/<namespace>/job:<name>/<uid8>
//	Pod        <cluster>/<namespace>/pod:<name>/<uid8>
//
// A Kubernetes object's name contains neither ':' nor '/', so a LockedJob's holder name, written as
// before kinds existed, can never look like another kind's. The token needs no kind: it is keyed by
// the UID, which is unique across kinds.
type Claimant struct {
	Kind      Kind
	Namespace string
	Name      string
	UID       types.UID
	// Created is the object's creation time: among equal priorities the older waiter goes first.
	Created time.Time
	// Lock is the lock the workload asks for, and under which terms.
	Lock batchv1alpha1.LockSpec
}

// ClaimantOf is the Claimant of a LockedJob.
func ClaimantOf(lj *batchv1alpha1.LockedJob) Claimant {
	return Claimant{
		Kind:      KindLockedJob,
		Namespace: lj.Namespace,
		Name:      lj.Name,
		UID:       lj.UID,
		Created:   lj.CreationTimestamp.Time,
		Lock:      lj.Spec.Lock,
	}
}

// holderPrefix marks a kind's object name in holder names. A LockedJob has none, so its holder
// names stay what they were before other kinds asked for locks (held locks are re-adopted by them).
var holderPrefix = map[Kind]string{KindLockedJob: "", KindJob: "job:", KindPod: "pod:"}

// ObjectName is the claimant's name as its holder name carries it, with its kind's prefix
// (job:<name> for a guarded Job): unique among the claimants of one namespace, whatever their kind.
func (c Claimant) ObjectName() string { return holderPrefix[c.Kind] + c.Name }
