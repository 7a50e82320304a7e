package plugin

import (
	"context"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Members: the workloads of a lock as the plugin reads them. A LockedJob says where it stands in
// its status; a guarded Job (a batch/v1 Job labelled batch.lockedjob.dev/lock, docs/design.md
// "Guarded Jobs and Pods") in its annotations and spec.suspend. Both kinds share one queue, one
// fencing sequence and the permits, so what reads a lock (holders by slot, waiters in queue order)
// reads members, whatever their kind.

// guardWaiting is where a guarded Job stands while it waits. The operator does not write it (a
// waiter's Job carries no guard annotation): it is read from the Job, suspended with no fence.
const guardWaiting batchv1alpha1.GuardState = "Waiting"

// member is one workload of a lock.
type member struct {
	claimant locks.Claimant
	// holding: a LockedJob whose condition LockAcquired is True, a guarded Job whose guard is Held.
	holding bool
	// waiting: a LockedJob in phase Waiting, a guarded Job that waits (guardOf).
	waiting    bool
	slot       *int32
	fence      *int64
	acquiredAt *metav1.Time // a guarded Job records none
	// lj is the LockedJob, nil for a guarded Job: its status says more (its place, the holder Redis
	// named to it, its releases).
	lj *batchv1alpha1.LockedJob
}

func memberOfLockedJob(lj *batchv1alpha1.LockedJob) member {
	return member{
		claimant: locks.ClaimantOf(lj),
		holding:  meta.IsStatusConditionTrue(lj.Status.Conditions, batchv1alpha1.ConditionLockAcquired),
		waiting:  lj.Status.Phase == batchv1alpha1.PhaseWaiting,
		slot:     lj.Status.Slot, fence: lj.Status.FencingToken, acquiredAt: lj.Status.AcquiredAt,
		lj: lj,
	}
}

// memberOfJob reads a guarded Job; the error is locks.ClaimantOfJob's, naming the label or
// annotation that does not parse.
func memberOfJob(job *batchv1.Job) (member, error) {
	c, err := locks.ClaimantOfJob(job)
	if err != nil {
		return member{}, err
	}
	guard := guardOf(job)
	var slot *int32
	if n := annotatedInt(job, batchv1alpha1.AnnotationSlot, 32); n != nil {
		slot = ptr.To(int32(*n))
	}
	return member{
		claimant: c,
		holding:  guard == batchv1alpha1.GuardHeld,
		waiting:  guard == guardWaiting,
		slot:     slot,
		fence:    annotatedInt(job, batchv1alpha1.AnnotationFencingToken, 64),
	}, nil
}

// guardOf is where a guarded Job stands: the guard its annotation records (Held, Released, Lost,
// Unguarded, ScopeNotAllowed); with none, guardWaiting while it is suspended without a fence (as
// the admission gate created it), else "" (it runs, and the operator has recorded nothing yet: it
// was not created suspended, and will be marked Unguarded).
func guardOf(job *batchv1.Job) batchv1alpha1.GuardState {
	if g, ok := job.Annotations[batchv1alpha1.AnnotationGuard]; ok {
		return batchv1alpha1.GuardState(g)
	}
	if _, fenced := job.Annotations[batchv1alpha1.AnnotationFencingToken]; !fenced && ptr.Deref(job.Spec.Suspend, false) {
		return guardWaiting
	}
	return ""
}

// annotatedInt is the Job's integer annotation key of the given bit size, nil when absent or not
// a number of that size.
func annotatedInt(job *batchv1.Job, key string, bitSize int) *int64 {
	n, err := strconv.ParseInt(job.Annotations[key], 10, bitSize)
	if err != nil {
		return nil
	}
	return &n
}

// membersOf are the members of every lock: each LockedJob, and each guarded Job that can be read
// as one. invalid names, per Job that cannot, what does not parse.
func membersOf(ljs []batchv1alpha1.LockedJob, jobs []batchv1.Job) (members []member, invalid []string) {
	members = make([]member, 0, len(ljs)+len(jobs))
	for i := range ljs {
		members = append(members, memberOfLockedJob(&ljs[i]))
	}
	for i := range jobs {
		m, err := memberOfJob(&jobs[i])
		if err != nil {
			invalid = append(invalid, fmt.Sprintf("Job %s/%s carries the lock label but cannot be guarded, so it is left out: %v", jobs[i].Namespace, jobs[i].Name, err))
			continue
		}
		members = append(members, m)
	}
	return members, invalid
}

// lock is the lock the member asks for.
func (m member) lock() lockID { return lockOfClaimant(m.claimant) }

// ref names the member with its kind.
func (m member) ref() Ref {
	return Ref{Kind: m.claimant.Kind, Namespace: m.claimant.Namespace, Name: m.claimant.Name}
}

// guardedJobs selects guarded Jobs on the API server: the lock label, and not a LockedJob's own Job
// (which runs under its LockedJob's lock), as the operator's cache of them does.
func guardedJobs() client.MatchingLabelsSelector {
	guarded, _ := labels.NewRequirement(batchv1alpha1.LabelGuardLock, selection.Exists, nil)
	own, _ := labels.NewRequirement(batchv1alpha1.LabelLockedJob, selection.DoesNotExist, nil)
	return client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*guarded, *own)}
}

// listWorkloads lists the LockedJobs and guarded Jobs of namespace ("" for all), plus, for
// Cluster-scoped locks used there, their LockedJobs and guarded Jobs in other namespaces: who
// holds a shared lock is often elsewhere. Without the right to list guarded Jobs, or to list every
// namespace, it says so in a warning and shows what it can.
func listWorkloads(ctx context.Context, c client.Reader, namespace string) ([]batchv1alpha1.LockedJob, []batchv1.Job, []string, error) {
	var ljList batchv1alpha1.LockedJobList
	if err := c.List(ctx, &ljList, client.InNamespace(namespace)); err != nil {
		return nil, nil, nil, fmt.Errorf("list LockedJobs: %w", err)
	}
	var warnings []string
	var jobList batchv1.JobList
	jobsListed := true
	if err := c.List(ctx, &jobList, client.InNamespace(namespace), guardedJobs()); apierrors.IsForbidden(err) {
		jobsListed = false
		warnings = append(warnings, fmt.Sprintf("cannot list Jobs, so guarded Jobs (labelled %s) are not shown: %v", batchv1alpha1.LabelGuardLock, err))
	} else if err != nil {
		return nil, nil, nil, fmt.Errorf("list guarded Jobs: %w", err)
	}
	ljs, jobs := ljList.Items, jobList.Items
	if namespace == "" {
		return ljs, jobs, warnings, nil
	}
	members, _ := membersOf(ljs, jobs)
	shared := map[string]bool{}
	for i := range members {
		if id := members[i].lock(); id.scope == batchv1alpha1.LockScopeCluster {
			shared[id.name] = true
		}
	}
	if len(shared) == 0 {
		return ljs, jobs, warnings, nil
	}
	elsewhere := func(o metav1.Object, c locks.Claimant) bool {
		id := lockOfClaimant(c)
		return o.GetNamespace() != namespace && id.scope == batchv1alpha1.LockScopeCluster && shared[id.name]
	}
	var allLJs batchv1alpha1.LockedJobList
	switch err := c.List(ctx, &allLJs); {
	case apierrors.IsForbidden(err):
		warnings = append(warnings, fmt.Sprintf("cannot list LockedJobs in all namespaces, so Cluster-scoped locks show only namespace %s: %v", namespace, err))
	case err != nil:
		return nil, nil, nil, fmt.Errorf("list LockedJobs of Cluster-scoped locks: %w", err)
	default:
		for i := range allLJs.Items {
			if lj := &allLJs.Items[i]; elsewhere(lj, locks.ClaimantOf(lj)) {
				ljs = append(ljs, *lj)
			}
		}
	}
	if !jobsListed {
		return ljs, jobs, warnings, nil
	}
	var allJobs batchv1.JobList
	switch err := c.List(ctx, &allJobs, guardedJobs()); {
	case apierrors.IsForbidden(err):
		warnings = append(warnings, fmt.Sprintf("cannot list Jobs in all namespaces, so Cluster-scoped locks show only the guarded Jobs of namespace %s: %v", namespace, err))
	case err != nil:
		return nil, nil, nil, fmt.Errorf("list guarded Jobs of Cluster-scoped locks: %w", err)
	default:
		for i := range allJobs.Items {
			job := &allJobs.Items[i]
			if cl, err := locks.ClaimantOfJob(job); err == nil && elsewhere(job, cl) {
				jobs = append(jobs, *job)
			}
		}
	}
	return ljs, jobs, warnings, nil
}
