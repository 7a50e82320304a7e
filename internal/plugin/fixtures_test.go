package plugin

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Fixtures: LockedJobs put into each situation the operator records, through the status
// subresource, with times relative to a fixed clock.

func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// createLockedJob creates a LockedJob on lock with a minimal Job template.
func createLockedJob(ns, name, lock string, mutate ...func(*batchv1alpha1.LockedJob)) *batchv1alpha1.LockedJob {
	GinkgoHelper()
	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{Name: lock},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
			}}}},
		},
	}
	for _, m := range mutate {
		m(lj)
	}
	Expect(k8sClient.Create(ctx, lj)).To(Succeed())
	return lj
}

func withPriority(p int32) func(*batchv1alpha1.LockedJob) {
	return func(lj *batchv1alpha1.LockedJob) { lj.Spec.Lock.Priority = p }
}

func withClusterScope(lj *batchv1alpha1.LockedJob) {
	lj.Spec.Lock.Scope = batchv1alpha1.LockScopeCluster
}

// setStatus writes status through the status subresource, as the operator does.
func setStatus(lj *batchv1alpha1.LockedJob, st batchv1alpha1.LockedJobStatus) {
	GinkgoHelper()
	lj.Status = st
	Expect(k8sClient.Status().Update(ctx, lj)).To(Succeed())
}

func at(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }

func cond(condType string, status metav1.ConditionStatus, reason, msg string, t time.Time) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t)}
}

// holderName is the operator's holder name of lj (locks.Identity.Holder) in cluster "envtest".
func holderName(lj *batchv1alpha1.LockedJob) string {
	return fmt.Sprintf("envtest/%s/%s/%s", lj.Namespace, lj.Name, string(lj.UID)[:8])
}

func runningStatus(fence int64, waitingSince, acquired time.Time, job string) batchv1alpha1.LockedJobStatus {
	return batchv1alpha1.LockedJobStatus{
		Phase: batchv1alpha1.PhaseRunning, FencingToken: ptr.To(fence), JobName: job,
		WaitingSince: at(waitingSince), AcquiredAt: at(acquired),
		Message: fmt.Sprintf("Job %s running", job),
		Conditions: []metav1.Condition{
			cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionTrue, batchv1alpha1.ReasonAcquired, "Lock acquired", acquired),
			cond(batchv1alpha1.ConditionFinished, metav1.ConditionFalse, batchv1alpha1.ReasonInProgress, "The LockedJob has not reached its end", waitingSince),
		},
	}
}

// waitingStatus is a waiter at an exact position (at most 3) behind holder, as the operator
// records it (controllers/lockedjob/wait.go).
func waitingStatus(lock string, position int32, holder string, waitingSince time.Time) batchv1alpha1.LockedJobStatus {
	return waiting(waitingSince, ptr.To(position), holder,
		fmt.Sprintf("Waiting for lock %s held by %s (position %d in queue)", lock, holder, position))
}

// bucketStatus is a waiter further back than bound, whose status names neither place nor holder.
func bucketStatus(lock string, bound int, waitingSince time.Time) batchv1alpha1.LockedJobStatus {
	return waiting(waitingSince, nil, "", fmt.Sprintf("Waiting for lock %s: waiters ahead (position >%d in queue)", lock, bound))
}

func waiting(waitingSince time.Time, position *int32, holder, msg string) batchv1alpha1.LockedJobStatus {
	return batchv1alpha1.LockedJobStatus{
		Phase: batchv1alpha1.PhaseWaiting, WaitingSince: at(waitingSince), QueuePosition: position, BlockedBy: holder, Message: msg,
		Conditions: []metav1.Condition{
			cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonWaiting, msg, waitingSince),
			cond(batchv1alpha1.ConditionFinished, metav1.ConditionFalse, batchv1alpha1.ReasonInProgress, "The LockedJob has not reached its end", waitingSince),
		},
	}
}

// endedStatus is a LockedJob that ended in phase with reason (condition Finished True at end).
func endedStatus(phase batchv1alpha1.LockedJobPhase, reason, msg string, fence int64, waitingSince, acquired, end time.Time) batchv1alpha1.LockedJobStatus {
	st := batchv1alpha1.LockedJobStatus{
		Phase: phase, FencingToken: ptr.To(fence), Message: msg,
		WaitingSince: at(waitingSince), AcquiredAt: at(acquired),
		Conditions: []metav1.Condition{
			cond(batchv1alpha1.ConditionLockAcquired, metav1.ConditionFalse, batchv1alpha1.ReasonReleased, "Lock released", end),
			cond(batchv1alpha1.ConditionFinished, metav1.ConditionTrue, reason, msg, end),
		},
	}
	if phase != batchv1alpha1.PhaseLockLost {
		st.ReleasedAt = at(end) // a lost lock is not released: it ended under its holder
	}
	return st
}

// recordEvent writes an Event about lj as the operator's recorder does (events.k8s.io/v1).
func recordEvent(lj *batchv1alpha1.LockedJob, t time.Time, eventType, reason, note string) {
	GinkgoHelper()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: lj.Namespace, GenerateName: lj.Name + "-"},
		EventTime:  metav1.NewMicroTime(t),
		Regarding: corev1.ObjectReference{
			APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "LockedJob",
			Namespace: lj.Namespace, Name: lj.Name, UID: lj.UID,
		},
		Type: eventType, Reason: reason, Action: "Test", Note: note,
		ReportingController: "lockedjob", ReportingInstance: "lockedjob-envtest",
	}
	Expect(k8sClient.Create(ctx, ev)).To(Succeed())
}

// parseTable reads a table the plugin printed into one map per row, keyed by header. Columns are
// cut where the header's columns start, so empty cells and cells with spaces read right.
func parseTable(out string) []map[string]string {
	GinkgoHelper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	Expect(lines).NotTo(BeEmpty())
	header := lines[0]
	var starts []int
	var names []string
	for _, loc := range regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(header, -1) {
		starts = append(starts, loc[0])
		names = append(names, header[loc[0]:loc[1]])
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, start := range starts {
			end := len(line)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(line))
			}
			if start < len(line) {
				row[names[i]] = strings.TrimSpace(line[start:end])
			} else {
				row[names[i]] = ""
			}
		}
		rows = append(rows, row)
	}
	return rows
}
